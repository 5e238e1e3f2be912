package edge

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// aliasBomb is a "billion laughs" cloud-config of about 10 KB, all inside
// instances.zone (a string key given a list, so that the error is about that
// value): 4,000 plain numbers, which keep go-yaml's alias-to-node ratio
// check quiet, a 1,000-byte string under an anchor, then four lists of ten
// aliases each to the one before. Expanded, it is about 10 MB.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("instances:\n  zone:\n  - [" + strings.Repeat("0,", 4000) + "0]\n")
	b.WriteString("  - &l0 \"" + strings.Repeat("x", 1000) + "\"\n")
	for level := 1; level <= 4; level++ {
		fmt.Fprintf(&b, "  - &l%d [", level)
		for i := range 10 {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", level-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// maxErrorLen bounds the text of any ParseConfig error in these tests: it
// names keys and quotes values, never a whole document.
const maxErrorLen = 2048

// checkErrorLen reports an error whose text is longer than maxErrorLen.
func checkErrorLen(t *testing.T, err error) {
	t.Helper()
	if n := len(err.Error()); n > maxErrorLen {
		t.Errorf("error text is %d bytes, want at most %d: %.300q...", n, maxErrorLen, err)
	}
}

// TestParseConfigAliasBomb proves that YAML aliases are bounded before they
// are expanded: a 10 KB file that expands to 10 MB is refused with an error
// that says so, is short, and costs little memory to refuse.
func TestParseConfigAliasBomb(t *testing.T) {
	in := aliasBomb()
	if len(in) >= 11_000 {
		t.Fatalf("the bomb is %d bytes, want a small file (< 11000)", len(in))
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseConfig(strings.NewReader(in))
	runtime.ReadMemStats(&after)

	if err == nil {
		t.Fatal("ParseConfig accepted an alias bomb, want an error")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error %.200q does not match ErrInvalidConfig", err)
	}
	if !strings.Contains(err.Error(), "alias") {
		t.Errorf("error %.300q does not name the problem (want it to contain %q)", err, "alias")
	}
	checkErrorLen(t, err)
	// A memory ceiling, not a timing: a generous bound (the file is 10 KB,
	// the refusal used to allocate ~315 MiB).
	const ceiling = 32 << 20
	if got := after.TotalAlloc - before.TotalAlloc; got >= ceiling {
		t.Errorf("%d bytes allocated to refuse a %d-byte file, want < %d", got, len(in), ceiling)
	}
}

// TestParseConfigDensestFile proves that the largest file read costs little
// memory even when it is all nodes: a list of maxConfigSize/2 zeros.
func TestParseConfigDensestFile(t *testing.T) {
	in := "instances:\n  zone: [" + strings.Repeat("0,", (maxConfigSize-30)/2) + "0]\n"
	if len(in) > maxConfigSize {
		t.Fatalf("the file is %d bytes, want at most maxConfigSize (%d)", len(in), maxConfigSize)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseConfig(strings.NewReader(in))
	runtime.ReadMemStats(&after)

	if err == nil {
		t.Fatal("ParseConfig accepted a list given to a string, want an error")
	}
	if want := "must be a string, not a list"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %.300q does not contain %q", err, want)
	}
	checkErrorLen(t, err)
	const ceiling = 32 << 20 // a memory ceiling, not a timing
	if got := after.TotalAlloc - before.TotalAlloc; got >= ceiling {
		t.Errorf("%d bytes allocated to refuse a %d-byte file, want < %d", got, len(in), ceiling)
	}
}

// TestParseConfigAliasesWithinBounds proves that aliases that stay small
// still work: bounding them is not refusing them.
func TestParseConfigAliasesWithinBounds(t *testing.T) {
	in := `
instances:
  nodes:
    pi-1: &pi
      zone: attic
      instanceType: rpi4
    pi-2: *pi
    pi-3:
      <<: *pi
      region: eu
`
	cfg, err := ParseConfig(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]NodeConfig{
		"pi-1": {Zone: "attic", InstanceType: "rpi4"},
		"pi-2": {Zone: "attic", InstanceType: "rpi4"},
		"pi-3": {Zone: "attic", Region: "eu", InstanceType: "rpi4"},
	}
	if diff := cmp.Diff(want, cfg.Instances.Nodes); diff != "" {
		t.Errorf("instances.nodes (-want +got):\n%s", diff)
	}
}

// TestParseConfigSelfReferentialAlias proves that an anchor whose value
// contains its own alias is an error, not an endless expansion.
func TestParseConfigSelfReferentialAlias(t *testing.T) {
	_, err := ParseConfig(strings.NewReader("instances:\n  zone: &a [*a]\n"))
	if err == nil {
		t.Fatal("ParseConfig accepted a self-referential alias, want an error")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error %v does not match ErrInvalidConfig", err)
	}
}

// manyKeys is n lines of distinct unknown top-level keys.
func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "unknown%d: 0\n", i)
	}
	return b.String()
}

// TestParseConfigQuotesBoundedValues proves that an error about a long value
// quotes only its start (a value of the wrong type, a string that is not
// valid, a key: each 60 KB), and that a file of many problems is reported
// with the first few.
func TestParseConfigQuotesBoundedValues(t *testing.T) {
	long := strings.Repeat("y", 60_000)
	for name, in := range map[string]string{
		"list given to a string": "instances:\n  zone: [\"" + long + "\"]\n",
		"invalid string":         "gateway:\n  url: ftp://" + long + "\n",
		"long node name":         "instances:\n  nodes:\n    ? " + long + "\n    : {}\n",
		"long unknown key":       "? " + long + "\n: 1\n",
		"many unknown keys":      strings.Repeat("gatway: 1\n", 1) + manyKeys(5000),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(in))
			if err == nil {
				t.Fatal("ParseConfig accepted it, want an error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %.300q does not match ErrInvalidConfig", err)
			}
			checkErrorLen(t, err)
		})
	}
}

// TestExamplesShowEveryKey keeps the copies of the cloud-config's keys from
// drifting: examples/edge-ccm/cloud-config.yaml and the ConfigMap of
// manifests/config.yaml show exactly the keys of Config (whose fields
// document them), the standalone ConfigMap only keys of Config.
// examples/edge-ccm's TestSampleCloudConfig proves that cloud-config.yaml
// shows their defaults.
func TestExamplesShowEveryKey(t *testing.T) {
	var inType []string
	var walkType func(prefix string, t reflect.Type)
	walkType = func(prefix string, t reflect.Type) {
		for f := range t.Fields() {
			key := prefix + f.Tag.Get("json")
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[metav1.Duration]() {
				walkType(key+".", f.Type)
			} else {
				inType = append(inType, key)
			}
		}
	}
	walkType("", reflect.TypeFor[Config]())

	const dir = "../../examples/edge-ccm/"
	for file, exact := range map[string]bool{"cloud-config.yaml": true, "manifests/config.yaml": true, "manifests/standalone/config.yaml": false} {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(dir + file)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(file, "manifests/") {
				var cm struct{ Data map[string]string }
				if err := yaml.Unmarshal(data, &cm); err != nil {
					t.Fatal(err)
				}
				data = []byte(cm.Data["cloud-config.yaml"])
				if len(data) == 0 {
					t.Fatal("the ConfigMap has no cloud-config.yaml")
				}
			}
			var sample map[string]any
			if err := yaml.Unmarshal(data, &sample); err != nil {
				t.Fatal(err)
			}
			var inSample []string
			var walkSample func(prefix string, m map[string]any)
			walkSample = func(prefix string, m map[string]any) {
				for k, v := range m {
					if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
						walkSample(prefix+k+".", sub)
					} else {
						inSample = append(inSample, prefix+k)
					}
				}
			}
			walkSample("", sample)
			if exact {
				if diff := cmp.Diff(inType, inSample, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("keys of Config (-) and of %s (+):\n%s", file, diff)
				}
			} else {
				var lacks []string
				for _, k := range inSample {
					if !slices.Contains(inType, k) {
						lacks = append(lacks, k)
					}
				}
				if len(lacks) > 0 {
					t.Errorf("keys of %s that Config lacks: %q", file, lacks)
				}
			}
		})
	}
}
