package loadbalancer

import (
	"strings"
	"testing"

	"github.com/ccmkit/ccmkit/igd"
)

// The description format is a contract with mappings already on routers:
// these literals must keep parsing, and new descriptions must keep being
// written exactly so, or a new version would orphan the old mappings.
func TestDescriptionFormatV1IsStable(t *testing.T) {
	long63 := strings.Repeat("n", 63)
	tests := []struct {
		name                   string
		cluster, ns, svc, port string
		wantToken, wantDesc    string
	}{
		{"short names", "kubernetes", "default", "web", "http",
			"kubernetes/default/web", "ck1 kubernetes/default/web http"},
		{"unnamed port", "kubernetes", "default", "web", "",
			"kubernetes/default/web", "ck1 kubernetes/default/web -"},
		{"longest readable owner (43 bytes)", "kubernetes", "abcdefghijklmno", "pqrstuvwxyzabcde", "https-alternate",
			"kubernetes/abcdefghijklmno/pqrstuvwxyzabcde", "ck1 kubernetes/abcdefghijklmno/pqrstuvwxyzabcde https-alternate"},
		{"one byte longer is hashed", "kubernetes", "abcdefghijklmno", "pqrstuvwxyzabcdef", "http",
			"#o3wx5xcs2ebk6set5crb", "ck1 #o3wx5xcs2ebk6set5crb http abcdefghijklmno/pqrstuvwxyzabcde"},
		{"63-byte names are hashed, hint cut to fit", "kubernetes", long63, long63, "metrics",
			"#viopl3xd3h6iht4pa5tz", "ck1 #viopl3xd3h6iht4pa5tz metrics " + strings.Repeat("n", 29)},
		{"unsafe cluster name is hashed", "my cluster", "default", "web", "http",
			"#nnbge5adk3gqz6rrennu", "ck1 #nnbge5adk3gqz6rrennu http default/web"},
		{"odd port name becomes -", "kubernetes", "default", "web", "Not_A_Port_Name_At_All",
			"kubernetes/default/web", "ck1 kubernetes/default/web -"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOwner(tt.cluster, tt.ns, tt.svc)
			if o.token != tt.wantToken {
				t.Errorf("token = %q, want %q", o.token, tt.wantToken)
			}
			d := o.description(tt.port)
			if d != tt.wantDesc {
				t.Errorf("description = %q, want %q", d, tt.wantDesc)
			}
			if len(d) > igd.MaxDescriptionLen {
				t.Errorf("description %q is %d bytes, routers keep %d", d, len(d), igd.MaxDescriptionLen)
			}
			p, ok := parseDescription(d)
			if !ok || p.token != o.token {
				t.Errorf("parseDescription(%q) = %+v, %v; want token %q", d, p, ok, o.token)
			}
		})
	}
}

func TestParseDescription(t *testing.T) {
	tests := []struct {
		in    string
		ok    bool
		token string
	}{
		{"ck1 kubernetes/default/web http", true, "kubernetes/default/web"},
		{"ck1 #abcdefghijklmnopqrst metrics some/hint", true, "#abcdefghijklmnopqrst"},
		{"ck1 kubernetes/default/web", false, ""},                       // cut inside the owner, maybe
		{"ck1 kubernetes/default/web ", true, "kubernetes/default/web"}, // cut after it
		{"ck1 kubernetes/default/web  x", false, ""},
		{"ck2 kubernetes/default/web http", false, ""},
		{"", false, ""},
		{"miniupnpc", false, ""},
		{"ck1  http x", false, ""},
	}
	for _, tt := range tests {
		p, ok := parseDescription(tt.in)
		if ok != tt.ok || p.token != tt.token {
			t.Errorf("parseDescription(%q) = %+v, %v; want token %q, %v", tt.in, p, ok, tt.token, tt.ok)
		}
	}
}

func TestDescriptionFitsForLongestNames(t *testing.T) {
	long := strings.Repeat("x", 63)
	for _, cluster := range []string{"kubernetes", strings.Repeat("c", 200), "a b"} {
		for _, portName := range []string{"", "p", strings.Repeat("p", 15), strings.Repeat("q", 40)} {
			d := newOwner(cluster, long, long).description(portName)
			if len(d) > igd.MaxDescriptionLen {
				t.Errorf("cluster %q port %q: description is %d bytes", cluster, portName, len(d))
			}
		}
	}
}
