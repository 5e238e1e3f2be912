package edge

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/google/go-cmp/cmp"
)

func TestParseConfigValid(t *testing.T) {
	withDefaults := func(mutate func(*Config)) Config {
		c := Default()
		mutate(&c)
		return c
	}
	tests := []struct {
		name string
		in   io.Reader // nil means a nil reader
		want Config
	}{
		{name: "nil reader", in: nil, want: Default()},
		{name: "empty", in: strings.NewReader(""), want: Default()},
		{name: "blank lines", in: strings.NewReader("\n  \n"), want: Default()},
		{name: "only a comment", in: strings.NewReader("# nothing here\n"), want: Default()},
		{name: "empty mapping", in: strings.NewReader("{}"), want: Default()},
		{name: "null document", in: strings.NewReader("null"), want: Default()},
		{name: "empty sections", in: strings.NewReader("gateway:\nloadBalancer: {}\ninstances:\n"), want: Default()},
		{
			name: "leading document marker",
			in:   strings.NewReader("---\nloadBalancer:\n  services: all\n"),
			want: withDefaults(func(c *Config) { c.LoadBalancer.Services = loadbalancer.AllServices }),
		},
		{
			// A trailing "---" (a template or a concatenation) starts an
			// empty document, which holds nothing to ignore.
			name: "trailing document marker",
			in:   strings.NewReader("loadBalancer:\n  services: all\n---\n# end\n"),
			want: withDefaults(func(c *Config) { c.LoadBalancer.Services = loadbalancer.AllServices }),
		},
		{
			name: "document end marker",
			in:   strings.NewReader("loadBalancer:\n  services: all\n...\n"),
			want: withDefaults(func(c *Config) { c.LoadBalancer.Services = loadbalancer.AllServices }),
		},
		{
			name: "shortest timeouts and renew interval",
			in:   strings.NewReader("gateway:\n  discoveryTimeout: 500ms\n  callTimeout: 100ms\nloadBalancer:\n  renewInterval: 10s\n"),
			want: withDefaults(func(c *Config) {
				c.Gateway.DiscoveryTimeout = metav1.Duration{Duration: 500 * time.Millisecond}
				c.Gateway.CallTimeout = metav1.Duration{Duration: 100 * time.Millisecond}
				c.LoadBalancer.RenewInterval = metav1.Duration{Duration: 10 * time.Second}
			}),
		},
		{
			name: "renew interval of discovery and six call timeouts",
			in:   strings.NewReader("gateway:\n  discoveryTimeout: 3s\n  callTimeout: 2s\nloadBalancer:\n  renewInterval: 15s\n"),
			want: withDefaults(func(c *Config) { c.LoadBalancer.RenewInterval = metav1.Duration{Duration: 15 * time.Second} }),
		},
		{
			name: "ipv6 on, router named, link-local with a zone",
			in:   strings.NewReader("gateway:\n  ipv6:\n    enabled: true\n    url: http://[fe80::1%25eth0]:5000/rootDesc.xml\n    interface: eth0\n"),
			want: withDefaults(func(c *Config) {
				c.Gateway.IPv6 = IPv6Config{Enabled: true, URL: "http://[fe80::1%25eth0]:5000/rootDesc.xml", Interface: "eth0"}
			}),
		},
		{
			name: "ipv6 on, renewing within half a pinhole's lease",
			in:   strings.NewReader("gateway:\n  ipv6:\n    enabled: true\nloadBalancer:\n  permanentLease: true\n  renewInterval: 12h\n"),
			want: withDefaults(func(c *Config) {
				c.Gateway.IPv6.Enabled = true
				c.LoadBalancer.PermanentLease = true
				c.LoadBalancer.RenewInterval = metav1.Duration{Duration: 12 * time.Hour}
			}),
		},
		{
			name: "null value keeps default",
			in:   strings.NewReader("gateway:\n  callTimeout:\n"),
			want: Default(),
		},
		{
			name: "one key, others default",
			in:   strings.NewReader("gateway:\n  url: http://192.168.1.1:5000/rootDesc.xml\n"),
			want: withDefaults(func(c *Config) { c.Gateway.URL = "http://192.168.1.1:5000/rootDesc.xml" }),
		},
		{
			name: "lease 0 is the default, as in loadbalancer.Config",
			in:   strings.NewReader("loadBalancer:\n  lease: 0\n"),
			want: withDefaults(func(c *Config) { c.LoadBalancer.Lease = metav1.Duration{} }),
		},
		{
			name: "lease 0s",
			in:   strings.NewReader("loadBalancer:\n  lease: 0s\n"),
			want: withDefaults(func(c *Config) { c.LoadBalancer.Lease = metav1.Duration{} }),
		},
		{
			name: "JSON works too",
			in:   strings.NewReader(`{"loadBalancer": {"services": "all"}}`),
			want: withDefaults(func(c *Config) { c.LoadBalancer.Services = loadbalancer.AllServices }),
		},
		{
			name: "every key",
			in: strings.NewReader(`
gateway:
  url: https://router.lan/desc.xml
  discoveryTimeout: 500ms
  callTimeout: 1m
  protocol: pcp
  pcpSecretFile: /etc/edge-ccm/pcp/secret
loadBalancer:
  lease: 168h
  services: annotated
  renewInterval: 10m
  secureMode: true
  allowNonPublicExternalIP: true
  nodeName: node-1
  allowedNamespaces: [web, games]
  allowedExternalPorts: ["443", "1024-65535"]
  maxMappings: 32
  maxMappingsPerService: 4
instances:
  zone: home
  region: eu-west
  instanceType: rpi4
  nodes:
    node-1.lan:
      addresses:
      - type: InternalIP
        address: 192.168.1.10
      - type: Hostname
        address: node-1
      zone: attic
      region: eu
      instanceType: nuc
`),
			want: Config{
				Gateway: GatewayConfig{
					URL:              "https://router.lan/desc.xml",
					DiscoveryTimeout: metav1.Duration{Duration: 500 * time.Millisecond},
					CallTimeout:      metav1.Duration{Duration: time.Minute},
					Protocol:         ProtocolPCP,
					PCPSecretFile:    "/etc/edge-ccm/pcp/secret",
				},
				LoadBalancer: LoadBalancerConfig{
					Lease:                    metav1.Duration{Duration: 168 * time.Hour},
					Services:                 loadbalancer.AnnotatedServices,
					RenewInterval:            metav1.Duration{Duration: 10 * time.Minute},
					SecureMode:               true,
					NodeName:                 "node-1",
					AllowNonPublicExternalIP: true,
					AllowedNamespaces:        []string{"web", "games"},
					AllowedExternalPorts:     []string{"443", "1024-65535"},
					MaxMappings:              32,
					MaxMappingsPerService:    4,
				},
				Instances: InstancesConfig{
					Zone:         "home",
					Region:       "eu-west",
					InstanceType: "rpi4",
					Nodes: map[string]NodeConfig{
						"node-1.lan": {
							Addresses: []NodeAddress{
								{Type: "InternalIP", Address: "192.168.1.10"},
								{Type: "Hostname", Address: "node-1"},
							},
							Zone: "attic", Region: "eu", InstanceType: "nuc",
						},
					},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.in)
			if err != nil {
				t.Fatalf("ParseConfig: unexpected error: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseConfig (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigInvalid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// fields are the field.Error.Field values expected, in order; nil
		// means the error is not about one field (syntax, duplicates).
		fields []string
		// contains is a substring of the error message.
		contains string
	}{
		{name: "unknown top-level key", in: "gatway: {}\n", fields: []string{"gatway"}, contains: "unknown field"},
		{name: "unknown nested key", in: "gateway:\n  urll: http://r/\n", fields: []string{"gateway.urll"}, contains: "known: callTimeout, discoveryTimeout, ipv6, pcpSecretFile, protocol, url"},
		{name: "unknown protocol", in: "gateway:\n  protocol: natpmp\n", fields: []string{"gateway.protocol"}, contains: `must be "auto", "upnp", "pcp" or "pcp-only"`},
		{name: "pcp without a secret", in: "gateway:\n  protocol: pcp\n", fields: []string{"gateway.pcpSecretFile"}, contains: "must be set with gateway.protocol"},
		{name: "pcp with permanent leases", in: "gateway:\n  protocol: pcp\n  pcpSecretFile: /s\nloadBalancer:\n  permanentLease: true\n", fields: []string{"loadBalancer.permanentLease"}, contains: "PCP mappings always have a lifetime"},
		{name: "key with wrong case", in: "loadbalancer:\n  lease: 1h\n", fields: []string{"loadbalancer"}, contains: "unknown field"},
		{name: "unknown key in a node entry", in: "instances:\n  nodes:\n    n1:\n      adresses: []\n", fields: []string{`instances.nodes[n1].adresses`}},
		{name: "duration without unit", in: "gateway:\n  callTimeout: 2\n", fields: []string{"gateway.callTimeout"}, contains: "no unit"},
		{name: "duration not parsable", in: "gateway:\n  callTimeout: fast\n", fields: []string{"gateway.callTimeout"}, contains: "not a Go duration"},
		{name: "duration as boolean", in: "loadBalancer:\n  lease: true\n", fields: []string{"loadBalancer.lease"}, contains: "not a boolean"},
		{name: "string given a number", in: "instances:\n  zone: 12\n", fields: []string{"instances.zone"}, contains: "must be a string"},
		{name: "string given a list", in: "gateway:\n  url: [a]\n", fields: []string{"gateway.url"}, contains: "not a list"},
		{name: "section given a string", in: "gateway: http://r/\n", fields: []string{"gateway"}, contains: "must be a mapping"},
		{name: "document is a list", in: "- a\n", fields: []string{"(document)"}, contains: "(document)"},
		{name: "list given a mapping", in: "instances:\n  nodes:\n    n1:\n      addresses: {type: InternalIP}\n", fields: []string{`instances.nodes[n1].addresses`}, contains: "must be a list"},
		{name: "allowed namespace not a name", in: "loadBalancer:\n  allowedNamespaces: [web, Games_1]\n", fields: []string{"loadBalancer.allowedNamespaces[1]"}, contains: "not a namespace name"},
		{name: "allowed ports not ports", in: "loadBalancer:\n  allowedExternalPorts: [\"0\", \"80-22\", http, \"1-70000\", \"443\"]\n",
			fields:   []string{"loadBalancer.allowedExternalPorts[0]", "loadBalancer.allowedExternalPorts[1]", "loadBalancer.allowedExternalPorts[2]", "loadBalancer.allowedExternalPorts[3]"},
			contains: `must be a port ("443") or a range of ports ("1024-65535"), from 1 to 65535`},
		{name: "negative caps", in: "loadBalancer:\n  maxMappings: -1\n  maxMappingsPerService: -2\n", fields: []string{"loadBalancer.maxMappings", "loadBalancer.maxMappingsPerService"}, contains: "must be 0 (no cap) or positive"},
		{name: "cap not a number", in: "loadBalancer:\n  maxMappings: many\n", fields: []string{"loadBalancer.maxMappings"}, contains: "must be a whole number, not a string"},
		{name: "duplicate key", in: "gateway:\n  url: http://a/\n  url: http://b/\n", contains: "not valid YAML"},
		{name: "YAML syntax", in: "gateway: [\n", contains: "not valid YAML"},
		{name: "second document", in: "gateway:\n  callTimeout: 5s\n---\nloadBalancer:\n  lease: 2h\n", fields: []string{"(document)"}, contains: "YAML document 2 (after a \"---\" line) would be ignored"},
		{name: "second document, an empty mapping", in: "gateway: {}\n---\n{}\n", fields: []string{"(document)"}, contains: "YAML document 2"},
		{name: "empty first document, then one", in: "---\n---\nloadBalancer:\n  lease: 2h\n", fields: []string{"(document)"}, contains: "YAML document 2"},
		{name: "third document after an empty one", in: "gateway: {}\n---\n---\nloadBalancer: {}\n", fields: []string{"(document)"}, contains: "YAML document 3"},
		{name: "url scheme", in: "gateway:\n  url: ftp://r/desc.xml\n", fields: []string{"gateway.url"}, contains: "http:// or https://"},
		{name: "url without host", in: "gateway:\n  url: http:///desc.xml\n", fields: []string{"gateway.url"}, contains: "no host"},
		{name: "url relative", in: "gateway:\n  url: rootDesc.xml\n", fields: []string{"gateway.url"}},
		{name: "zero call timeout", in: "gateway:\n  callTimeout: 0s\n", fields: []string{"gateway.callTimeout"}, contains: "at least 100ms"},
		{name: "negative discovery timeout", in: "gateway:\n  discoveryTimeout: -1s\n", fields: []string{"gateway.discoveryTimeout"}},
		{name: "huge timeout", in: "gateway:\n  discoveryTimeout: 2m\n", fields: []string{"gateway.discoveryTimeout"}, contains: "at most 1m0s"},
		{name: "call timeout below the floor", in: "gateway:\n  callTimeout: 1ns\n", fields: []string{"gateway.callTimeout"}, contains: "at least 100ms"},
		{name: "call timeout just below the floor", in: "gateway:\n  callTimeout: 99ms\n", fields: []string{"gateway.callTimeout"}, contains: "at least 100ms and at most 1m0s"},
		{name: "discovery timeout below the floor", in: "gateway:\n  discoveryTimeout: 1ns\n", fields: []string{"gateway.discoveryTimeout"}, contains: "at least 500ms"},
		{name: "renew interval below the floor", in: "gateway:\n  discoveryTimeout: 500ms\n  callTimeout: 100ms\nloadBalancer:\n  renewInterval: 1ms\n", fields: []string{"loadBalancer.renewInterval"}, contains: "at least 10s"},
		{name: "renew interval below the default timeouts' pass", in: "loadBalancer:\n  renewInterval: 14s\n", fields: []string{"loadBalancer.renewInterval"}, contains: "at least 15s (gateway.discoveryTimeout + 6 × gateway.callTimeout)"},
		{name: "renew interval below long timeouts' pass", in: "gateway:\n  discoveryTimeout: 1m\n  callTimeout: 1m\nloadBalancer:\n  renewInterval: 5m\n", fields: []string{"loadBalancer.renewInterval"}, contains: "at least 7m0s"},
		{name: "ipv6 url over IPv4", in: "gateway:\n  ipv6:\n    url: http://192.168.1.1:5000/rootDesc.xml\n", fields: []string{"gateway.ipv6.url"}, contains: "must be an IPv6 address in brackets"},
		{name: "ipv6 url a host name", in: "gateway:\n  ipv6:\n    url: http://router.lan:5000/rootDesc.xml\n", fields: []string{"gateway.ipv6.url"}, contains: "must be an IPv6 address in brackets"},
		{name: "ipv6 url scheme", in: "gateway:\n  ipv6:\n    url: ftp://[2001:db8::1]/\n", fields: []string{"gateway.ipv6.url"}, contains: "must be an http:// URL"},
		{name: "ipv6 interface not a name", in: "gateway:\n  ipv6:\n    interface: eth0/1\n", fields: []string{"gateway.ipv6.interface"}, contains: "must be a network interface name"},
		{name: "ipv6 interface too long", in: "gateway:\n  ipv6:\n    interface: a-very-long-interface\n", fields: []string{"gateway.ipv6.interface"}, contains: "at most 15 characters"},
		{name: "ipv6 unknown key", in: "gateway:\n  ipv6:\n    enable: true\n", fields: []string{"gateway.ipv6.enable"}, contains: "known: enabled, interface, url"},
		{name: "ipv6 enabled not a boolean", in: "gateway:\n  ipv6:\n    enabled: yes please\n", fields: []string{"gateway.ipv6.enabled"}, contains: "must be true or false"},
		{name: "renew interval above half a pinhole's lease", in: "gateway:\n  ipv6:\n    enabled: true\nloadBalancer:\n  permanentLease: true\n  renewInterval: 13h\n", fields: []string{"loadBalancer.renewInterval"}, contains: "12h0m0s"},
		{name: "lease too short", in: "loadBalancer:\n  lease: 30s\n", fields: []string{"loadBalancer.lease"}, contains: "between 1m0s and 168h0m0s"},
		{name: "lease too long", in: "loadBalancer:\n  lease: 169h\n", fields: []string{"loadBalancer.lease"}},
		{name: "negative lease", in: "loadBalancer:\n  lease: -1h\n", fields: []string{"loadBalancer.lease"}},
		{name: "lease not whole seconds", in: "loadBalancer:\n  lease: 90500ms\n", fields: []string{"loadBalancer.lease"}, contains: "whole seconds"},
		{name: "renew interval above half the lease", in: "loadBalancer:\n  lease: 10m\n  renewInterval: 6m\n", fields: []string{"loadBalancer.renewInterval"}, contains: "at most half the lease (5m0s)"},
		{name: "renew interval negative", in: "loadBalancer:\n  renewInterval: -1m\n", fields: []string{"loadBalancer.renewInterval"}},
		{name: "renew interval above half of a permanent lease", in: "loadBalancer:\n  permanentLease: true\n  renewInterval: 85h\n", fields: []string{"loadBalancer.renewInterval"}, contains: "84h0m0s"},
		{name: "renew interval above half of the default lease", in: "loadBalancer:\n  lease: 0\n  renewInterval: 31m\n", fields: []string{"loadBalancer.renewInterval"}, contains: "30m0s"},
		{name: "a lease with permanentLease", in: "loadBalancer:\n  permanentLease: true\n  lease: 2h\n", fields: []string{"loadBalancer.lease"}, contains: "permanentLease"},
		{name: "secure mode as a string", in: "loadBalancer:\n  secureMode: \"yes\"\n", fields: []string{"loadBalancer.secureMode"}, contains: "true or false"},
		{name: "services value", in: "loadBalancer:\n  services: some\n", fields: []string{"loadBalancer.services"}, contains: `"all" or "annotated"`},
		{name: "node name", in: "loadBalancer:\n  nodeName: Node_1\n", fields: []string{"loadBalancer.nodeName"}},
		{name: "zone label value", in: "instances:\n  zone: my zone\n", fields: []string{"instances.zone"}, contains: "label value"},
		{name: "node entry name", in: "instances:\n  nodes:\n    BAD_NAME: {}\n", fields: []string{`instances.nodes[BAD_NAME]`}},
		{name: "address type", in: "instances:\n  nodes:\n    n1:\n      addresses:\n      - {type: InternalIp, address: 10.0.0.1}\n", fields: []string{`instances.nodes[n1].addresses[0].type`}, contains: "InternalIP, ExternalIP"},
		{name: "address not an IP", in: "instances:\n  nodes:\n    n1:\n      addresses:\n      - {type: ExternalIP, address: example.com}\n", fields: []string{`instances.nodes[n1].addresses[0].address`}, contains: "IP address"},
		{name: "hostname not DNS", in: "instances:\n  nodes:\n    n1:\n      addresses:\n      - {type: Hostname, address: 'a b'}\n", fields: []string{`instances.nodes[n1].addresses[0].address`}},
		{
			name:   "every problem is reported",
			in:     "gateway:\n  callTimeout: 0s\n  url: ftp://x/\nloadBalancer:\n  services: none\n  lease: 1s\n",
			fields: []string{"gateway.url", "gateway.callTimeout", "loadBalancer.lease", "loadBalancer.services"},
		},
		{
			name:   "every decoding problem is reported",
			in:     "gateway:\n  callTimeout: 5\n  bogus: 1\ninstances:\n  zone: [x]\n",
			fields: []string{"gateway.bogus", "gateway.callTimeout", "instances.zone"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("ParseConfig(%q) = %+v, want an error", tt.in, got)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not match ErrInvalidConfig", err)
			}
			if tt.contains != "" && !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not contain %q", err, tt.contains)
			}
			if tt.fields != nil {
				if gotFields := fieldsOf(err); !slices.Equal(gotFields, tt.fields) {
					t.Errorf("error names fields %q, want %q (error: %v)", gotFields, tt.fields, err)
				}
				for _, f := range tt.fields {
					if !strings.Contains(err.Error(), f) {
						t.Errorf("error %q does not name field %q", err, f)
					}
				}
			}
		})
	}
}

// fieldsOf returns the Field of every *field.Error in err, in order.
func fieldsOf(err error) []string {
	var out []string
	for _, fe := range fieldErrors(err) {
		out = append(out, fe.Field)
	}
	return out
}

// fieldErrors returns the *field.Error values of the aggregate err wraps.
func fieldErrors(err error) []*field.Error {
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) {
		return nil
	}
	var out []*field.Error
	for _, e := range agg.Errors() {
		if fe, ok := e.(*field.Error); ok {
			out = append(out, fe)
		}
	}
	return out
}

func TestParseConfigReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := ParseConfig(io.MultiReader(strings.NewReader("gateway:\n"), errReader{boom}))
	if !errors.Is(err, boom) || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("ParseConfig = %v, want an error matching both the read error and ErrInvalidConfig", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestParseConfigTooLarge(t *testing.T) {
	big := "# " + strings.Repeat("x", maxConfigSize) + "\n"
	if _, err := ParseConfig(strings.NewReader(big)); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("ParseConfig(%d bytes) = %v, want a size error", len(big), err)
	}
}

// TestConfigRoundTrip proves that a Config written out with sigs.k8s.io/yaml
// (durations as strings) reads back unchanged.
func TestConfigRoundTrip(t *testing.T) {
	in := Default()
	in.LoadBalancer.Lease = metav1.Duration{Duration: 90 * time.Minute}
	in.Instances.Nodes = map[string]NodeConfig{"n1": {Addresses: []NodeAddress{{Type: "InternalIP", Address: "10.0.0.1"}}}}
	data, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("lease: 1h30m0s")) {
		t.Errorf("marshalled config does not write the lease as a duration string:\n%s", data)
	}
	out, err := ParseConfig(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("ParseConfig(marshalled config): %v\n%s", err, data)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip changed the config (-in +out):\n%s", diff)
	}
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if (Config{}).Validate() == nil {
		t.Fatal("the zero Config validated; its zero timeouts must be refused")
	}
}
