package fake_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// captureEnv names the environment variable that makes TestCaptureFixtures
// rewrite testdata/miniupnpd from a real miniupnpd in the lab.
const captureEnv = "CCMKIT_CAPTURE_FIXTURES"

// soapBody is a SOAP request body as goupnp builds it.
func soapBody(service, action, args string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" s:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body>` +
		`<u:` + action + ` xmlns:u="` + service + `">` + args + `</u:` + action + `></s:Body></s:Envelope>`
}

// fixtureStep is one request of the fixture sequence and the file its
// answer is kept in.
type fixtureStep struct {
	file   string
	node   int    // 0: 192.0.2.10, 1: 192.0.2.11
	get    string // path of a GET; empty for a SOAP POST to /ctl/IPConn
	action string
	body   string
}

// fixtureLab is one lab configuration fixtures are captured from.
type fixtureLab struct {
	dir     string
	opts    igdtest.Options
	service fake.UPnPService
}

var fixtureLabs = []fixtureLab{
	{"igd2", igdtest.Options{Nodes: 2}, fake.WANIPConnection2},
	{"igd1", igdtest.Options{Nodes: 2, ForceIGDv1: true}, fake.WANIPConnection1},
	{"igd2-secure", igdtest.Options{Nodes: 2, SecureMode: true}, fake.WANIPConnection2},
}

// fixtureSteps is the request sequence, run in order on a fresh router.
func fixtureSteps(l fixtureLab) []fixtureStep {
	svc := string(l.service)
	post := func(file, action, args string) fixtureStep {
		return fixtureStep{file: file, action: action, body: soapBody(svc, action, args)}
	}
	mapArgs := func(port, client, desc, lease string) string {
		return `<NewRemoteHost></NewRemoteHost><NewExternalPort>` + port + `</NewExternalPort><NewProtocol>TCP</NewProtocol>` +
			`<NewInternalPort>30080</NewInternalPort><NewInternalClient>` + client + `</NewInternalClient><NewEnabled>1</NewEnabled>` +
			`<NewPortMappingDescription>` + desc + `</NewPortMappingDescription><NewLeaseDuration>` + lease + `</NewLeaseDuration>`
	}
	key := func(port string) string {
		return `<NewRemoteHost></NewRemoteHost><NewExternalPort>` + port + `</NewExternalPort><NewProtocol>TCP</NewProtocol>`
	}
	if l.opts.SecureMode {
		del := post("DeletePortMapping-other-606.http", "DeletePortMapping", key("40001"))
		del.node = 1
		return []fixtureStep{
			post("AddPortMapping.http", "AddPortMapping", mapArgs("40001", "192.0.2.10", "mine", "3600")),
			post("AddPortMapping-other-718.http", "AddPortMapping", mapArgs("40002", "192.0.2.11", "theirs", "3600")),
			post("AddAnyPortMapping-other-606.http", "AddAnyPortMapping", mapArgs("40002", "192.0.2.11", "theirs", "3600")),
			del,
		}
	}
	steps := []fixtureStep{
		{file: "rootDesc.http", get: "/rootDesc.xml"},
		post("AddPortMapping-501.http", "AddPortMapping", mapArgs("40003", "", "empty client", "3600")),
		post("GetExternalIPAddress.http", "GetExternalIPAddress", ""),
		post("GetSpecificPortMappingEntry-714.http", "GetSpecificPortMappingEntry", key("40001")),
		post("GetGenericPortMappingEntry-713.http", "GetGenericPortMappingEntry", "<NewPortMappingIndex>0</NewPortMappingIndex>"),
		post("AddPortMapping.http", "AddPortMapping", mapArgs("40001", "192.0.2.10", "ccmkit a&amp;b", "3600")),
		post("AddPortMapping-718.http", "AddPortMapping", mapArgs("40001", "192.0.2.11", "other", "3600")),
		post("AddPortMapping-716.http", "AddPortMapping", mapArgs("0", "192.0.2.10", "zero", "3600")),
		post("AddPortMapping-402.http", "AddPortMapping", key("40002")),
		post("GetSpecificPortMappingEntry.http", "GetSpecificPortMappingEntry", key("40001")),
		post("GetGenericPortMappingEntry.http", "GetGenericPortMappingEntry", "<NewPortMappingIndex>0</NewPortMappingIndex>"),
		post("DeletePortMapping-missing.http", "DeletePortMapping", key("40009")),
		{file: "BadXML.http", action: "AddPortMapping", body: `<s:Envelope><s:Body><u:AddPortMapping`},
		post("UnknownAction.http", "NoSuchAction", ""),
		post("GetStatusInfo.http", "GetStatusInfo", ""),
	}
	if l.service == fake.WANIPConnection2 {
		list := func(proto string) string {
			return `<NewStartPort>0</NewStartPort><NewEndPort>65535</NewEndPort><NewProtocol>` + proto + `</NewProtocol><NewManage>1</NewManage><NewNumberOfPorts>1000</NewNumberOfPorts>`
		}
		steps = append(steps,
			post("GetListOfPortMappings.http", "GetListOfPortMappings", list("TCP")),
			post("GetListOfPortMappings-empty.http", "GetListOfPortMappings", list("UDP")),
			post("GetListOfPortMappings-402.http", "GetListOfPortMappings", `<NewStartPort>0</NewStartPort><NewEndPort>65535</NewEndPort>`),
			post("DeletePortMappingRange-730.http", "DeletePortMappingRange", `<NewStartPort>50000</NewStartPort><NewEndPort>50010</NewEndPort><NewProtocol>UDP</NewProtocol><NewManage>1</NewManage>`),
		)
	}
	return append(steps, post("DeletePortMapping.http", "DeletePortMapping", key("40001")))
}

// TestCaptureFixtures regenerates testdata/miniupnpd (the exact HTTP
// responses of miniupnpd 2.3.1 in the lab, Date header removed) when
// CCMKIT_CAPTURE_FIXTURES=1. It is how those files were made.
func TestCaptureFixtures(t *testing.T) {
	if os.Getenv(captureEnv) != "1" {
		t.Skipf("set %s=1 to capture fixtures from a real miniupnpd (needs the lab)", captureEnv)
	}
	for _, l := range fixtureLabs {
		t.Run(l.dir, func(t *testing.T) {
			lab := igdtest.Start(t, l.opts)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			dir := filepath.Join("testdata", "miniupnpd", l.dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, s := range fixtureSteps(l) {
				args := []string{"-sS", "-i", "http://192.0.2.1:5000" + s.get}
				if s.get == "" {
					args = []string{"-sS", "-i", "-X", "POST",
						"-H", `SOAPAction: "` + string(l.service) + "#" + s.action + `"`,
						"-H", `Content-Type: text/xml; charset="utf-8"`,
						"--data-binary", s.body, "http://192.0.2.1:5000/ctl/IPConn"}
				}
				out, err := lab.ExecNode(ctx, s.node, "curl", args...)
				if err != nil {
					t.Fatalf("%s: %v", s.file, err)
				}
				var lines []string
				for _, line := range strings.Split(out, "\n") {
					if !strings.HasPrefix(strings.ToLower(line), "date:") {
						lines = append(lines, line)
					}
				}
				if err := os.WriteFile(filepath.Join(dir, s.file), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// readFixture parses a captured HTTP response.
func readFixture(t *testing.T, name string) (*http.Response, []byte) {
	t.Helper()
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return resp, body
}

// uptime matches the one value that differs between runs.
var uptime = regexp.MustCompile(`<NewUptime>\d+</NewUptime>`)

// TestServerMatchesMiniupnpd replays the fixture sequence against a fake
// Server and checks that every answer (status, content type, body) is the
// one miniupnpd gave, byte for byte.
func TestServerMatchesMiniupnpd(t *testing.T) {
	for _, l := range fixtureLabs {
		t.Run(l.dir, func(t *testing.T) {
			r, _ := newRouter(igdconformanceConfig(l.opts.SecureMode))
			srvs := []*fake.Server{
				newServer(t, r, fake.ServerOptions{Service: l.service, ClientAddr: fixed(hostA)}),
				newServer(t, r, fake.ServerOptions{Service: l.service, ClientAddr: fixed(hostB)}),
			}
			for _, s := range fixtureSteps(l) {
				wantResp, wantBody := readFixture(t, filepath.Join("testdata", "miniupnpd", l.dir, s.file))
				srv := srvs[s.node]
				var req *http.Request
				if s.get != "" {
					req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+s.get, nil)
				} else {
					req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, srv.ControlURL(), strings.NewReader(s.body))
					req.Header.Set("SOAPAction", `"`+string(l.service)+"#"+s.action+`"`)
					req.Header.Set("Content-Type", `text/xml; charset="utf-8"`)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", s.file, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != wantResp.StatusCode {
					t.Errorf("%s: status %d, miniupnpd %d", s.file, resp.StatusCode, wantResp.StatusCode)
				}
				for _, h := range []string{"Content-Type", "Connection"} {
					if got, want := resp.Header.Get(h), wantResp.Header.Get(h); got != want {
						t.Errorf("%s: header %s %q, miniupnpd %q", s.file, h, got, want)
					}
				}
				if s.file == "GetStatusInfo.http" {
					body = uptime.ReplaceAll(body, nil)
					wantBody = uptime.ReplaceAll(wantBody, nil)
				}
				if !bytes.Equal(body, wantBody) {
					t.Errorf("%s: body differs from miniupnpd's\n got  %q\n want %q", s.file, body, wantBody)
				}
			}
		})
	}
}

func fixed(a netip.Addr) func(*http.Request) netip.Addr {
	return func(*http.Request) netip.Addr { return a }
}

func newServer(t *testing.T, r *fake.Router, opts fake.ServerOptions) *fake.Server {
	t.Helper()
	s := fake.NewServer(r, opts)
	t.Cleanup(s.Close)
	return s
}
