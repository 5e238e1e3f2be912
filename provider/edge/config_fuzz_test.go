package edge

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// FuzzParseConfig checks that no cloud-config (operator input, read from a
// file or a ConfigMap) makes ParseConfig panic, that every refusal matches
// ErrInvalidConfig and stays short enough for an event or a log line, and
// that what it accepts is valid and survives being written back as YAML and
// read again unchanged. Seeds: the shipped sample
// (examples/edge-ccm/cloud-config.yaml) and the cases of config_test.go's
// tables that a fuzzer would take long to reach (aliases, several
// documents, durations).
func FuzzParseConfig(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("..", "..", "examples", "edge-ccm", "cloud-config.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample)
	for _, s := range []string{
		"",
		"gateway:\n  url: http://192.168.1.1:5000/rootDesc.xml\n  discoveryTimeout: 5s\n  callTimeout: 1500ms\n",
		"gateway:\n  protocol: pcp\n  pcpSecretFile: /etc/edge-ccm/pcp-secret\n",
		"loadBalancer:\n  lease: 1h\n  services: all\n  renewInterval: 20m\n  secureMode: true\n  nodeName: node-1\n",
		"instances:\n  zone: home\n  nodes:\n    node-1:\n      addresses:\n      - {type: InternalIP, address: 192.168.1.10}\n",
		"a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n",
		"gateway: {}\n---\nloadBalancer: {}\n",
		"loadBalancer:\n  lease: -1s\n  lease: 2s\n",
		"gateway:\n  url: 3\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("ParseConfig(%q) = %v, which does not match ErrInvalidConfig", data, err)
			}
			if n := len(err.Error()); n > 8<<10 {
				t.Fatalf("ParseConfig(%q): a %d-byte error", data, n)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig(%q) accepted a config that does not validate: %v", data, err)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("ParseConfig(%q) = %+v, which does not marshal: %v", data, cfg, err)
		}
		again, err := ParseConfig(strings.NewReader(string(out)))
		if err != nil {
			t.Fatalf("ParseConfig(%q) = %+v, written back as\n%s\nis refused: %v", data, cfg, out, err)
		}
		if diff := cmp.Diff(cfg, again); diff != "" {
			t.Fatalf("ParseConfig(%q), written back and read again, changed (-first +again):\n%s", data, diff)
		}
	})
}
