package fake_test

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// fault is the part of a SOAP fault body the tests read.
type fault struct {
	Code        int    `xml:"Body>Fault>detail>UPnPError>errorCode"`
	Description string `xml:"Body>Fault>detail>UPnPError>errorDescription"`
}

// soapCall posts one SOAP action to srv and returns the HTTP status and
// body.
func soapCall(t *testing.T, srv *fake.Server, svc fake.UPnPService, action, args string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.ControlURL(), strings.NewReader(soapBody(string(svc), action, args)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("SOAPAction", `"`+string(svc)+"#"+action+`"`)
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// faultCode returns the UPnP error code of a fault body, 0 if it is none.
func faultCode(t *testing.T, body string) int {
	t.Helper()
	var f fault
	if err := xml.Unmarshal([]byte(body), &f); err != nil {
		t.Fatalf("response is not XML: %v\n%s", err, body)
	}
	return f.Code
}

func addArgs(port uint16, client, lease string) string {
	return `<NewRemoteHost></NewRemoteHost><NewExternalPort>` + itoa(port) + `</NewExternalPort><NewProtocol>TCP</NewProtocol><NewInternalPort>30080</NewInternalPort>` +
		`<NewInternalClient>` + client + `</NewInternalClient><NewEnabled>1</NewEnabled><NewPortMappingDescription>d</NewPortMappingDescription><NewLeaseDuration>` + lease + `</NewLeaseDuration>`
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func TestServerFaults(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	srv := newServer(t, r, fake.ServerOptions{ClientAddr: fixed(hostA)})
	svc := fake.WANIPConnection2
	for _, tc := range []struct {
		name, action, args string
		want               int
	}{
		{"unknown action", "Reboot", "", 401},
		{"missing argument", "AddPortMapping", `<NewExternalPort>1</NewExternalPort>`, 402},
		{"port not a number", "GetSpecificPortMappingEntry", `<NewRemoteHost/><NewExternalPort>x</NewExternalPort><NewProtocol>TCP</NewProtocol>`, 402},
		{"port out of range", "GetSpecificPortMappingEntry", `<NewRemoteHost/><NewExternalPort>65536</NewExternalPort><NewProtocol>TCP</NewProtocol>`, 402},
		{"internal client not an address", "AddPortMapping", addArgs(40000, "node-a", "0"), 402},
		{"empty internal client", "AddPortMapping", addArgs(40000, "", "0"), 501},
		{"external port 0", "AddPortMapping", addArgs(0, "192.0.2.10", "0"), 716},
		{"lease over 32 bits", "AddPortMapping", addArgs(40000, "192.0.2.10", "4294967296"), 402},
		{"list without protocol", "GetListOfPortMappings", `<NewStartPort>0</NewStartPort><NewEndPort>65535</NewEndPort><NewManage>1</NewManage><NewNumberOfPorts>10</NewNumberOfPorts>`, 402},
		{"range upside down", "DeletePortMappingRange", `<NewStartPort>9</NewStartPort><NewEndPort>1</NewEndPort><NewProtocol>TCP</NewProtocol><NewManage>1</NewManage>`, 733},
		{"generic index past the end", "GetGenericPortMappingEntry", `<NewPortMappingIndex>0</NewPortMappingIndex>`, 713},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := soapCall(t, srv, svc, tc.action, tc.args)
			if status != http.StatusInternalServerError || faultCode(t, body) != tc.want {
				t.Errorf("status %d, code %d; want 500 with UPnP %d\n%s", status, faultCode(t, body), tc.want, body)
			}
		})
	}
	if n := len(r.Mappings()); n != 0 {
		t.Errorf("bad requests stored %d mappings", n)
	}
}

func TestServerRejectsMalformedRequests(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	srv := newServer(t, r, fake.ServerOptions{})
	svc := string(fake.WANIPConnection2)
	good := soapBody(svc, "GetExternalIPAddress", "")
	for _, tc := range []struct {
		name, soapAction, body string
		want                   int
	}{
		{"no SOAPAction", "", good, 401},
		{"SOAPAction without action", `"` + svc + `"`, good, 401},
		{"action differs from body", `"` + svc + `#GetStatusInfo"`, good, 401},
		{"truncated XML", `"` + svc + `#GetExternalIPAddress"`, good[:len(good)-20], 402},
		{"not XML", `"` + svc + `#GetExternalIPAddress"`, "hello", 402},
		{"no envelope", `"` + svc + `#GetExternalIPAddress"`, `<u:GetExternalIPAddress xmlns:u="x"/>`, 402},
		{"empty body", `"` + svc + `#GetExternalIPAddress"`, "", 402},
		{"huge body", `"` + svc + `#GetExternalIPAddress"`, good + strings.Repeat(" ", 70<<10), 402},
		{"other charset", `"` + svc + `#GetExternalIPAddress"`, strings.Replace(good, "UTF-8", "ISO-8859-1", 1), 402},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.ControlURL(), strings.NewReader(tc.body))
			if tc.soapAction != "" {
				req.Header.Set("SOAPAction", tc.soapAction)
			}
			status, body := do(t, req)
			if status != http.StatusInternalServerError || faultCode(t, body) != tc.want {
				t.Errorf("status %d, code %d; want 500 with UPnP %d\n%s", status, faultCode(t, body), tc.want, body)
			}
		})
	}
	// The SOAPAction header may come unquoted.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.ControlURL(), strings.NewReader(good))
	req.Header.Set("SOAPAction", svc+"#GetExternalIPAddress")
	if status, body := do(t, req); status != http.StatusOK || !strings.Contains(body, "198.51.101.7") {
		t.Errorf("unquoted SOAPAction: status %d\n%s", status, body)
	}
}

func TestServerRoutes(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	srv := newServer(t, r, fake.ServerOptions{Service: fake.WANPPPConnection1})
	get := func(path string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+path, nil)
		status, _ := do(t, req)
		return status
	}
	if s := get("/rootDesc.xml"); s != http.StatusOK {
		t.Errorf("GET /rootDesc.xml: %d", s)
	}
	if s := get("/ctl/PPPConn"); s != http.StatusMethodNotAllowed {
		t.Errorf("GET on the control URL: %d, want 405", s)
	}
	if s := get("/nothing"); s != http.StatusNotFound {
		t.Errorf("GET /nothing: %d, want 404", s)
	}
	if !strings.HasSuffix(srv.ControlURL(), "/ctl/PPPConn") {
		t.Errorf("ControlURL %s, want .../ctl/PPPConn", srv.ControlURL())
	}
	// Other services of the description answer 401 to everything.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL()+"/ctl/L3F", strings.NewReader(soapBody(string(fake.WANPPPConnection1), "GetExternalIPAddress", "")))
	req.Header.Set("SOAPAction", `"`+string(fake.WANPPPConnection1)+`#GetExternalIPAddress"`)
	if status, body := do(t, req); status != 500 || faultCode(t, body) != 401 {
		t.Errorf("action on /ctl/L3F: %d %s, want 401 fault", status, body)
	}
	// IGD:2 actions do not exist on a :1 service.
	for _, action := range []string{"AddAnyPortMapping", "GetListOfPortMappings", "DeletePortMappingRange"} {
		if status, body := soapCall(t, srv, fake.WANPPPConnection1, action, ""); status != 500 || faultCode(t, body) != 401 {
			t.Errorf("%s on WANPPPConnection:1: %d, want 401 fault\n%s", action, status, body)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("NewServer with an unknown service did not panic")
		}
	}()
	fake.NewServer(r, fake.ServerOptions{Service: "urn:schemas-upnp-org:service:Nope:1"})
}

func TestServerDefaultClientAddrIsRemoteIP(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(true))
	srv := newServer(t, r, fake.ServerOptions{})
	// In secure mode only the caller's own address may be mapped: the caller
	// is 127.0.0.1 here.
	if status, body := soapCall(t, srv, fake.WANIPConnection2, "AddPortMapping", addArgs(40000, "127.0.0.1", "60")); status != http.StatusOK {
		t.Errorf("mapping to the caller's own address: %d\n%s", status, body)
	}
	if status, body := soapCall(t, srv, fake.WANIPConnection2, "AddPortMapping", addArgs(40001, "192.0.2.10", "60")); faultCode(t, body) != 718 {
		t.Errorf("mapping to another address in secure mode: %d, want 718\n%s", status, body)
	}
	if got := r.Calls()[0].Client; got != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("call log client %s, want 127.0.0.1", got)
	}
}

func TestServerAddAnyPortMapping(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secure bool
		caller netip.Addr
		client string
		want   string // reserved port, or fault code
	}{
		{"free port is taken as asked", false, hostA, "192.0.2.10", "40001"},
		{"port held by another host moves on", false, hostA, "192.0.2.10", "40002"},
		{"secure mode, other host", true, hostA, "192.0.2.11", "606"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRouter(igdconformanceConfig(tc.secure))
			if tc.want == "40002" {
				r.Put(tcp(40001, hostB))
			}
			srv := newServer(t, r, fake.ServerOptions{ClientAddr: fixed(tc.caller)})
			status, body := soapCall(t, srv, fake.WANIPConnection2, "AddAnyPortMapping", addArgs(40001, tc.client, "60"))
			if status == http.StatusOK {
				if !strings.Contains(body, "<NewReservedPort>"+tc.want+"</NewReservedPort>") {
					t.Errorf("reserved port: want %s\n%s", tc.want, body)
				}
				return
			}
			if got := faultCode(t, body); itoa(uint16(got)) != tc.want {
				t.Errorf("fault %d, want %s", got, tc.want)
			}
		})
	}
}

// TestServerAddAnyPortMappingNoFreePort fills every port from 80 up with
// another host's mappings and asks for port 80: the search for a free port
// wraps from 65535 to 1024 and never comes back to 80, so it must give up
// with 728 rather than spin forever holding the router's lock.
func TestServerAddAnyPortMappingNoFreePort(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	for p := 80; p <= 65535; p++ {
		r.Put(tcp(uint16(p), hostB))
	}
	srv := newServer(t, r, fake.ServerOptions{ClientAddr: fixed(hostA)})
	type answer struct {
		status int
		body   string
	}
	done := make(chan answer, 1)
	go func() {
		status, body := soapCall(t, srv, fake.WANIPConnection2, "AddAnyPortMapping", addArgs(80, "192.0.2.10", "60"))
		done <- answer{status, body}
	}()
	select {
	case a := <-done:
		if got := faultCode(t, a.body); a.status != http.StatusInternalServerError || got != upnp.CodeNoPortMapsAvailable {
			t.Errorf("AddAnyPortMapping with no free port: status %d, fault %d, want 500 and 728\n%s", a.status, got, a.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AddAnyPortMapping with no free port did not answer within 30s")
	}
}

func TestServerDeletePortMappingRange(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	r.Put(tcp(40001, hostA))
	r.Put(tcp(40002, hostB))
	r.Put(tcp(40010, hostA))
	srv := newServer(t, r, fake.ServerOptions{ClientAddr: fixed(hostA)})
	rng := func(manage string) string {
		return `<NewStartPort>40000</NewStartPort><NewEndPort>40005</NewEndPort><NewProtocol>TCP</NewProtocol><NewManage>` + manage + `</NewManage>`
	}
	// Without NewManage only the caller's own mappings go.
	if status, body := soapCall(t, srv, fake.WANIPConnection2, "DeletePortMappingRange", rng("0")); status != http.StatusOK {
		t.Fatalf("DeletePortMappingRange: %d\n%s", status, body)
	}
	var ports []uint16
	for _, m := range r.Mappings() {
		ports = append(ports, m.ExternalPort)
	}
	if len(ports) != 2 || ports[0] != 40002 || ports[1] != 40010 {
		t.Errorf("after deleting own mappings in range: %v, want [40002 40010]", ports)
	}
	if status, _ := soapCall(t, srv, fake.WANIPConnection2, "DeletePortMappingRange", rng("1")); status != http.StatusOK {
		t.Errorf("managed DeletePortMappingRange: %d", status)
	}
	if _, body := soapCall(t, srv, fake.WANIPConnection2, "DeletePortMappingRange", rng("1")); faultCode(t, body) != 730 {
		t.Errorf("empty range: want 730\n%s", body)
	}
}

func TestServerListPages(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	for p := uint16(40005); p >= 40001; p-- {
		r.Put(tcp(p, hostA))
	}
	srv := newServer(t, r, fake.ServerOptions{})
	_, body := soapCall(t, srv, fake.WANIPConnection2, "GetListOfPortMappings",
		`<NewStartPort>40002</NewStartPort><NewEndPort>65535</NewEndPort><NewProtocol>TCP</NewProtocol><NewManage>1</NewManage><NewNumberOfPorts>2</NewNumberOfPorts>`)
	var resp struct {
		Listing string `xml:"Body>GetListOfPortMappingsResponse>NewPortListing"`
	}
	if err := xml.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Ports []int `xml:"PortMappingEntry>NewExternalPort"`
	}
	if err := xml.Unmarshal([]byte(resp.Listing), &list); err != nil {
		t.Fatalf("listing: %v\n%s", err, resp.Listing)
	}
	if len(list.Ports) != 2 || list.Ports[0] != 40002 || list.Ports[1] != 40003 {
		t.Errorf("page of 2 from 40002: %v, want [40002 40003] (ascending)", list.Ports)
	}
}

func TestServerHooks(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	srv := newServer(t, r, fake.ServerOptions{ClientAddr: fixed(hostA)})
	c := serverClient(t, r, fake.WANIPConnection2, hostA)

	// A UPnPError from a hook becomes a fault with its code, seen by the real client.
	first := fake.Nth(1)
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if first() {
			return igd.Mapping{}, &igd.UPnPError{Code: upnp.CodeNoPortMapsAvailable}
		}
		return next(ctx, m)
	}})
	_, err := c.AddPortMapping(tctx(t), tcp(40000, hostA))
	if !errors.Is(err, igd.ErrNoPortMapsAvailable) {
		t.Errorf("hooked AddPortMapping through the server: %v, want ErrNoPortMapsAvailable", err)
	}
	// Any other error is 501.
	r.Intercept(fake.RouterHooks{SOAPAction: func(ctx context.Context, _ netip.Addr, action string, next fake.ActionFunc) error {
		if action == "GetStatusInfo" {
			return errors.New("internal")
		}
		return next(ctx)
	}})
	if _, body := soapCall(t, srv, fake.WANIPConnection2, "GetStatusInfo", ""); faultCode(t, body) != 501 {
		t.Errorf("plain error from a hook: want 501\n%s", body)
	}
	// A delay ends with the request.
	r.Intercept(fake.RouterHooks{ExternalIP: func(ctx context.Context, _ netip.Addr, next fake.AddrFunc) (netip.Addr, error) {
		if err := fake.Sleep(ctx, time.Hour); err != nil {
			return netip.Addr{}, err
		}
		return next(ctx)
	}})
	ctx, cancel := context.WithTimeout(tctx(t), 50*time.Millisecond)
	defer cancel()
	if _, err := c.ExternalIP(ctx); err == nil {
		t.Error("ExternalIP through a delayed server returned in time")
	}
	// The server notices the client gave up when the connection closes, a
	// moment after the client returned: wait for the delayed call to end
	// and be logged.
	var calls []fake.Call
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		calls = r.Calls()
		if last := calls[len(calls)-1]; last.Method == fake.MethodExternalIP && last.Err != nil {
			break
		}
	}
	// The log names SOAP actions and the caller.
	var methods []string
	for _, call := range calls {
		if call.Client != hostA {
			t.Errorf("call %s logged from %s, want %s", call.Action, call.Client, hostA)
		}
		methods = append(methods, call.Action)
	}
	// The client's discovery calls come first.
	if got := strings.Join(methods, ","); !strings.HasSuffix(got, "AddPortMapping,GetStatusInfo,GetExternalIPAddress") {
		t.Errorf("logged methods %s, want ...AddPortMapping,GetStatusInfo,GetExternalIPAddress", got)
	}
}

func TestServerUptimeRestartsOnReboot(t *testing.T) {
	r, clk := newRouter(igdconformanceConfig(false))
	srv := newServer(t, r, fake.ServerOptions{Service: fake.WANIPConnection1})
	clk.Step(90 * time.Second)
	if _, body := soapCall(t, srv, fake.WANIPConnection1, "GetStatusInfo", ""); !strings.Contains(body, "<NewUptime>90</NewUptime>") {
		t.Errorf("uptime after 90 s:\n%s", body)
	}
	r.Reboot()
	clk.Step(2 * time.Second)
	if _, body := soapCall(t, srv, fake.WANIPConnection1, "GetStatusInfo", ""); !strings.Contains(body, "<NewUptime>2</NewUptime>") {
		t.Errorf("uptime 2 s after a reboot:\n%s", body)
	}
}

func TestServerCloseEndsHeldRequests(t *testing.T) {
	r, _ := newRouter(igdconformanceConfig(false))
	srv := fake.NewServer(r, fake.ServerOptions{})
	never := make(chan struct{})
	entered := make(chan struct{})
	r.Intercept(fake.RouterHooks{ExternalIP: func(ctx context.Context, _ netip.Addr, next fake.AddrFunc) (netip.Addr, error) {
		close(entered)
		if err := fake.Hold(ctx, never); err != nil {
			return netip.Addr{}, err
		}
		return next(ctx)
	}})
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.ControlURL(), strings.NewReader(soapBody(string(fake.WANIPConnection2), "GetExternalIPAddress", "")))
		req.Header.Set("SOAPAction", `"`+string(fake.WANIPConnection2)+`#GetExternalIPAddress"`)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while a hook held a request")
	}
	calls := r.Calls()
	if len(calls) != 1 || !errors.Is(calls[0].Err, context.Canceled) {
		t.Errorf("held call logged as %+v, want one call ending with context.Canceled", calls)
	}
}

// A request its client has already given up on reaches no hook (and so
// uses up no Nth counter), as on the Client path.
func TestGivenUpRequestReachesNoHook(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(r, fake.ServerOptions{})
	defer srv.Close()
	ran := false
	r.Intercept(fake.RouterHooks{SOAPAction: func(ctx context.Context, _ netip.Addr, _ string, next fake.ActionFunc) error {
		ran = true
		return next(ctx)
	}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, srv.ControlURL(), strings.NewReader(soapBody(string(fake.WANIPConnection2), "GetStatusInfo", "")))
	req.Header.Set("SOAPAction", `"`+string(fake.WANIPConnection2)+`#GetStatusInfo"`)
	srv.ServeHTTP(httptest.NewRecorder(), req)
	if ran {
		t.Error("a SOAPAction hook ran for a request whose context had ended")
	}
	if calls := r.Calls(); len(calls) != 1 || !errors.Is(calls[0].Err, context.Canceled) {
		t.Errorf("calls = %+v, want the request logged with context.Canceled", calls)
	}
}
