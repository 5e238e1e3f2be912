package compose

import (
	"os"
	"strings"
	"testing"

	"github.com/ccmkit/ccmkit/registry"
)

const (
	readme        = "../../README.md"
	readmeHeading = "## Quick start: compose your own CCM"
	beginMarker   = "// README:begin\n"
	endMarker     = "// README:end\n"
)

// TestREADMEShowsThisCode checks that the README's compose snippet (the first
// ```go block under its heading) is exactly the code between the markers of
// compose.go, which the build compiles.
func TestREADMEShowsThisCode(t *testing.T) {
	src, err := os.ReadFile("compose.go")
	if err != nil {
		t.Fatal(err)
	}
	want, err := between(string(src), beginMarker, endMarker)
	if err != nil {
		t.Fatalf("compose.go: %v", err)
	}
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	section, err := between(string(doc), readmeHeading+"\n", "\n## ")
	if err != nil {
		t.Fatalf("%s: %v", readme, err)
	}
	got, err := between(section, "```go\n", "```\n")
	if err != nil {
		t.Fatalf("%s, section %q: %v", readme, readmeHeading, err)
	}
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("%s's snippet differs from compose.go's code between the markers; copy it over.\nREADME:\n%s\ncompose.go:\n%s", readme, got, want)
	}
}

// between returns the text of s after the first begin and before the next
// end.
func between(s, begin, end string) (string, error) {
	_, rest, ok := strings.Cut(s, begin)
	if !ok {
		return "", &markerError{begin}
	}
	text, _, ok := strings.Cut(rest, end)
	if !ok {
		return "", &markerError{end}
	}
	return text, nil
}

type markerError struct{ marker string }

func (e *markerError) Error() string { return "no " + strings.TrimSpace(e.marker) + " marker" }

// TestSnippetBuilds builds the snippet's provider through the default
// registry, as a CCM would: it registers, builds without I/O and serves
// load balancers and instances.
func TestSnippetBuilds(t *testing.T) {
	cloud, err := registry.Build("homelab", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cloud.ProviderName() != "homelab" || !cloud.HasClusterID() {
		t.Errorf("built %q, cluster ID %v", cloud.ProviderName(), cloud.HasClusterID())
	}
	if _, ok := cloud.LoadBalancer(); !ok {
		t.Error("no LoadBalancer")
	}
	if _, ok := cloud.InstancesV2(); !ok {
		t.Error("no InstancesV2")
	}
}
