package igdtest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// testTimeout bounds each lab test's client calls; a healthy lab answers in
// milliseconds.
const testTimeout = 60 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// serveHTTP serves body on addr inside node n's namespace until the test ends.
func serveHTTP(t *testing.T, n *igdtest.Node, addr, body string) {
	t.Helper()
	ln, err := n.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

// upnpc runs upnpc on a node and fails the test when it exits non-zero.
func upnpc(ctx context.Context, t *testing.T, lab *igdtest.Lab, node int, args ...string) string {
	t.Helper()
	out, err := lab.Upnpc(ctx, node, args...)
	if err != nil {
		t.Fatalf("%v; upnpc output:\n%s\nminiupnpd log:\n%s", err, out, lab.Log())
	}
	return out
}

// listed reports whether `upnpc -l` output lists the mapping
// "EXTPORT->INTERNAL:PORT" for protocol proto.
func listed(out, proto, mapping string) bool {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// " 0 TCP  8080->192.0.2.10:30080 'libminiupnpc' '' 604800"
		if len(f) >= 3 && f[1] == proto && f[2] == mapping {
			return true
		}
	}
	return false
}

func TestListed(t *testing.T) {
	out := ` i protocol exPort->inAddr:inPort description remoteHost leaseTime
 0 TCP  8080->192.0.2.10:30080 'libminiupnpc' '' 604800
GetGenericPortMappingEntry() returned 713 (SpecifiedArrayIndexInvalid)`
	for _, tc := range []struct {
		proto, mapping string
		want           bool
	}{
		{"TCP", "8080->192.0.2.10:30080", true},
		{"UDP", "8080->192.0.2.10:30080", false},
		{"TCP", "8081->192.0.2.10:30080", false},
		{"TCP", "8080->192.0.2.11:30080", false},
	} {
		if got := listed(out, tc.proto, tc.mapping); got != tc.want {
			t.Errorf("listed(%s %s) = %v, want %v", tc.proto, tc.mapping, got, tc.want)
		}
	}
}

func TestMappingAndDataPath(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	serveHTTP(t, lab.Nodes[0], "192.0.2.10:30080", "hello from node 0")
	url := "http://" + lab.ExternalIP.String() + ":8080/"

	_, err := lab.InternetGet(ctx, url)
	if err == nil {
		t.Fatal("the WAN port answered before any mapping existed")
	}

	out := upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	if !strings.Contains(out, "is redirected to internal 192.0.2.10:30080") {
		t.Fatalf("upnpc -a output lacks %q:\n%s", "is redirected to internal 192.0.2.10:30080", out)
	}
	out = upnpc(ctx, t, lab, 0, "-l")
	if !listed(out, "TCP", "8080->192.0.2.10:30080") {
		t.Fatalf("upnpc -l does not list the mapping:\n%s", out)
	}

	body, err := lab.InternetGet(ctx, url)
	if err != nil {
		t.Fatalf("%v; miniupnpd log:\n%s", err, lab.Log())
	}
	if body != "hello from node 0" {
		t.Fatalf("the WAN port answered %q, want %q", body, "hello from node 0")
	}
}

func TestRestartKeepsRebootWipes(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	serveHTTP(t, lab.Nodes[0], "192.0.2.10:30080", "still here")
	url := "http://" + lab.ExternalIP.String() + ":8080/"
	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")

	pid := lab.PID()
	lab.Restart(t)
	if lab.PID() == pid {
		t.Fatalf("Restart did not start a new miniupnpd: PID still %d", pid)
	}
	out := upnpc(ctx, t, lab, 0, "-l")
	if !listed(out, "TCP", "8080->192.0.2.10:30080") {
		t.Fatalf("mapping lost by Restart:\n%s", out)
	}
	body, err := lab.InternetGet(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if body != "still here" {
		t.Fatalf("the WAN port answered %q, want %q", body, "still here")
	}

	lab.Reboot(t)
	out = upnpc(ctx, t, lab, 0, "-l")
	if listed(out, "TCP", "8080->192.0.2.10:30080") {
		t.Fatalf("mapping survived Reboot:\n%s", out)
	}
	_, err = lab.InternetGet(ctx, url)
	if err == nil {
		t.Fatal("data path survived Reboot")
	}

	// The rebooted router works: the mapping can be made again.
	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	body, err = lab.InternetGet(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if body != "still here" {
		t.Fatalf("the WAN port answered %q, want %q", body, "still here")
	}
}

// TestParallelLabs runs labs at the same time, with the same addresses, and
// checks that each sees only its own table and data path.
func TestParallelLabs(t *testing.T) {
	for i := range 2 {
		t.Run(fmt.Sprint("lab", i), func(t *testing.T) {
			t.Parallel()
			lab := igdtest.Start(t, igdtest.Options{})
			ctx := testContext(t)
			want := fmt.Sprint("lab ", i)
			serveHTTP(t, lab.Nodes[0], "192.0.2.10:30080", want)
			ext := fmt.Sprint(8080 + i)
			upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", ext, "TCP")
			out := upnpc(ctx, t, lab, 0, "-l")
			if !listed(out, "TCP", ext+"->192.0.2.10:30080") {
				t.Fatalf("own mapping missing:\n%s", out)
			}
			other := fmt.Sprint(8080 + 1 - i)
			if listed(out, "TCP", other+"->192.0.2.10:30080") {
				t.Fatalf("the other lab's mapping is visible:\n%s", out)
			}
			body, err := lab.InternetGet(ctx, "http://"+lab.ExternalIP.String()+":"+ext+"/")
			if err != nil {
				t.Fatal(err)
			}
			if body != want {
				t.Fatalf("the WAN port answered %q, want %q", body, want)
			}
		})
	}
}

func TestTwoLabsAreIsolated(t *testing.T) {
	a := igdtest.Start(t, igdtest.Options{})
	b := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	if a.RouterNS == b.RouterNS {
		t.Fatalf("both labs' router namespace is %s", a.RouterNS)
	}
	if a.Nodes[0].Name == b.Nodes[0].Name {
		t.Fatalf("both labs' node 0 namespace is %s", a.Nodes[0].Name)
	}
	if a.PID() == b.PID() {
		t.Fatalf("both labs' miniupnpd is PID %d", a.PID())
	}

	upnpc(ctx, t, a, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	out := upnpc(ctx, t, b, 0, "-l")
	if listed(out, "TCP", "8080->192.0.2.10:30080") {
		t.Fatalf("lab b sees lab a's mapping:\n%s", out)
	}
	out = upnpc(ctx, t, a, 0, "-l")
	if !listed(out, "TCP", "8080->192.0.2.10:30080") {
		t.Fatalf("lab a lost its mapping:\n%s", out)
	}
}

func TestSecureMode(t *testing.T) {
	for _, tc := range []struct {
		name         string
		secure       bool
		wantForOther bool // whether node 0 may map to node 1's address
	}{
		{"secure", true, false},
		{"open", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lab := igdtest.Start(t, igdtest.Options{SecureMode: tc.secure, Nodes: 2})
			ctx := testContext(t)
			if len(lab.Nodes) != 2 {
				t.Fatalf("%d nodes, want 2", len(lab.Nodes))
			}
			if got := lab.Nodes[1].Addr.String(); got != "192.0.2.11" {
				t.Fatalf("node 1 has address %s, want 192.0.2.11", got)
			}

			out, err := lab.Upnpc(ctx, 0, "-a", "192.0.2.11", "30081", "8081", "TCP")
			if tc.wantForOther {
				if err != nil {
					t.Fatalf("%v; upnpc output:\n%s", err, out)
				}
			} else {
				if err == nil {
					t.Fatalf("AddPortMapping to another host succeeded:\n%s", out)
				}
				if !strings.Contains(out, "failed with code 718") {
					t.Fatalf("AddPortMapping to another host should fail with 718; upnpc output:\n%s", out)
				}
			}
			out = upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
			if !strings.Contains(out, "is redirected to internal 192.0.2.10:30080") {
				t.Fatalf("mapping to itself must work; upnpc -a output lacks %q:\n%s", "is redirected to internal 192.0.2.10:30080", out)
			}

			out = upnpc(ctx, t, lab, 0, "-l")
			if !listed(out, "TCP", "8080->192.0.2.10:30080") {
				t.Fatalf("own mapping missing:\n%s", out)
			}
			if got := listed(out, "TCP", "8081->192.0.2.11:30081"); got != tc.wantForOther {
				t.Fatalf("mapping to another host listed: %v, want %v:\n%s", got, tc.wantForOther, out)
			}
		})
	}
}

func TestRootDescription(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v1       bool
		want     string
		dontWant string
	}{
		{"IGDv2", false, "urn:schemas-upnp-org:service:WANIPConnection:2", "urn:schemas-upnp-org:service:WANIPConnection:1"},
		{"ForceIGDv1", true, "urn:schemas-upnp-org:service:WANIPConnection:1", "urn:schemas-upnp-org:service:WANIPConnection:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lab := igdtest.Start(t, igdtest.Options{ForceIGDv1: tc.v1})
			ctx := testContext(t)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, lab.RootDescURL, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := lab.Nodes[0].HTTPClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("root description: status %d, want %d", resp.StatusCode, http.StatusOK)
			}
			if !strings.Contains(string(body), tc.want) {
				t.Fatalf("root description lacks %q:\n%s", tc.want, body)
			}
			if strings.Contains(string(body), tc.dontWant) {
				t.Fatalf("root description has %q, want it not to:\n%s", tc.dontWant, body)
			}
		})
	}
}

// TestNodeNamespace checks that Do runs inside the node's namespace and
// leaves the caller's thread where it was.
func TestNodeNamespace(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	for _, n := range lab.Nodes {
		var inside []string
		if err := n.Do(func() error {
			var err error
			inside, err = addrs()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(inside, n.Addr.String()+"/24") {
			t.Fatalf("node %s: addresses inside %q, want %s among them", n.Name, inside, n.Addr.String()+"/24")
		}
		if len(inside) != 2 { // lo and eth0
			t.Fatalf("node %s: %d addresses inside, want 2: %v", n.Name, len(inside), inside)
		}

		outside, err := addrs()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(outside, n.Addr.String()+"/24") {
			t.Fatalf("Do leaked the namespace into the caller: addresses outside %q include %s", outside, n.Addr.String()+"/24")
		}
	}

	wantErr := errors.New("from fn")
	if err := lab.Nodes[0].Do(func() error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("Do = %v, want fn's error %v", err, wantErr)
	}
}

func addrs() ([]string, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var s []string
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			s = append(s, a.String())
		}
	}
	return s, nil
}

// TestSSDPSearch checks ListenPacket: an SSDP M-SEARCH sent from a socket
// opened in the node namespace is answered by the lab's router.
func TestSSDPSearch(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	pc, err := lab.Nodes[0].ListenPacket(ctx, "udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()

	msg := "M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 1\r\n" +
		"ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n\r\n"
	dst := &net.UDPAddr{IP: net.IPv4(239, 255, 255, 250), Port: 1900}
	if err := pc.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = pc.WriteTo([]byte(msg), dst)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("%v; no SSDP answer; miniupnpd log:\n%s", err, lab.Log())
	}
	if got := from.(*net.UDPAddr).IP.String(); got != lab.RouterLAN.String() {
		t.Fatalf("SSDP answer from %s, want the router %s", got, lab.RouterLAN)
	}
	if !strings.Contains(string(buf[:n]), lab.RootDescURL) {
		t.Fatalf("SSDP answer lacks the root description URL %s:\n%s", lab.RootDescURL, buf[:n])
	}
}

// TestCleanup checks that after a lab's test ends its namespaces are gone,
// its miniupnpd is dead and the harness's goroutines have exited.
func TestCleanup(t *testing.T) {
	before := runtime.NumGoroutine()
	var names []string
	var pid int
	t.Run("lab", func(t *testing.T) {
		lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
		names = append([]string{lab.RouterNS, lab.InternetNS}, lab.Nodes[0].Name, lab.Nodes[1].Name)
		pid = lab.PID()
		if pid == 0 {
			t.Fatal("lab.PID() = 0, want the daemon's PID")
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			t.Fatalf("%v; miniupnpd not running during the test", err)
		}
		if string(comm) != "miniupnpd\n" {
			t.Fatalf("PID is not the daemon's: its comm is %q, want %q", comm, "miniupnpd\n")
		}
		list := netnsList(t)
		for _, n := range names {
			if !slices.Contains(list, n) {
				t.Fatalf("namespace %s missing during the test: %q", n, list)
			}
		}
	})
	if len(names) == 0 {
		t.Fatal("the lab subtest recorded no namespaces")
	}
	list := netnsList(t)
	for _, n := range names {
		if slices.Contains(list, n) {
			t.Fatalf("namespace left behind: %s in %q", n, list)
		}
	}
	if !processGone(pid) {
		t.Fatalf("miniupnpd (pid %d) still running", pid)
	}
	// Polled here rather than with Eventually, whose own goroutine counts.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines left running: %d before, %d now:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	}
}

func netnsList(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

func TestCleanStale(t *testing.T) {
	igdtest.Require(t)
	// A pid that certainly belonged to a process that is gone: a child we
	// started and reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid

	stale := fmt.Sprintf("igdt%d-1-abcdef-r", dead)
	live := fmt.Sprintf("igdt%d-999-abcdef-r", unix.Getpid())
	foreign := fmt.Sprintf("other%d-1-abcdef-r", dead) // not ours: never touched
	for _, ns := range []string{stale, live, foreign} {
		if err := exec.Command("ip", "netns", "add", ns).Run(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}

	removed, err := igdtest.CleanStale(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, stale) {
		t.Fatalf("CleanStale removed %q, want the stale %s among them", removed, stale)
	}
	if slices.Contains(removed, live) {
		t.Fatalf("CleanStale removed %q, including the live %s", removed, live)
	}
	if slices.Contains(removed, foreign) {
		t.Fatalf("CleanStale removed %q, including the foreign %s", removed, foreign)
	}
	list := netnsList(t)
	if slices.Contains(list, stale) {
		t.Fatalf("the stale %s is still listed: %q", stale, list)
	}
	if !slices.Contains(list, live) {
		t.Fatalf("the live %s is gone: %q", live, list)
	}
	if !slices.Contains(list, foreign) {
		t.Fatalf("the foreign %s is gone: %q", foreign, list)
	}
}

// helperEnv names the environment variable that makes TestHelperProcess act:
// "fail" starts a lab and fails the test, "crash" starts a lab and kills its
// own process before any cleanup can run.
const helperEnv = "IGDTEST_HELPER_MODE"

// TestHelperProcess is not a real test: the tests below re-run the test
// binary with it to watch a lab from outside a process that fails or dies.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	names := []string{lab.RouterNS, lab.InternetNS, lab.Nodes[0].Name, lab.Nodes[1].Name}
	fmt.Printf("LAB %d %s\n", lab.PID(), strings.Join(names, ","))
	switch mode {
	case "fail":
		t.Fatal("failing on purpose")
	case "crash":
		_ = unix.Kill(os.Getpid(), unix.SIGKILL)
		select {}
	}
}

// runHelper runs TestHelperProcess in mode and returns the lab it reported.
func runHelper(t *testing.T, mode string) (pid int, names []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
	// The child's t.TempDir lands in ours, so a crashed child leaves no files.
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("helper in mode %s should not succeed:\n%s", mode, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "LAB "); ok {
			_, err := fmt.Sscanf(rest, "%d", &pid)
			if err != nil {
				t.Fatal(err)
			}
			names = strings.Split(strings.Fields(rest)[1], ",")
		}
	}
	if pid == 0 {
		t.Fatalf("helper did not report its lab:\n%s", out)
	}
	t.Cleanup(func() {
		for _, ns := range names {
			_ = exec.Command("ip", "netns", "del", ns).Run() // only if the test failed
		}
	})
	return pid, names
}

// processGone reports whether pid has exited (a zombie counts as exited: in a
// container without an init that reaps orphans it may linger).
func processGone(pid int) bool {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	return strings.Contains(string(status), "\nState:\tZ")
}

func TestCleanupAfterFailedTest(t *testing.T) {
	igdtest.Require(t)
	pid, names := runHelper(t, "fail")
	if !processGone(pid) {
		t.Fatalf("miniupnpd (pid %d) outlived its failed test", pid)
	}
	list := netnsList(t)
	for _, n := range names {
		if slices.Contains(list, n) {
			t.Fatalf("namespace left behind by a failed test: %s in %q", n, list)
		}
	}
}

func TestCrashedTestLeavesNoDaemon(t *testing.T) {
	igdtest.Require(t)
	pid, names := runHelper(t, "crash")
	// The parent-death signal kills the daemon when its test process dies.
	for deadline := time.Now().Add(5 * time.Second); !processGone(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("miniupnpd (pid %d) outlived its crashed test process", pid)
		}
	}
	// Its namespaces are left behind, and CleanStale removes them.
	left := netnsList(t)
	for _, n := range names {
		if !slices.Contains(left, n) {
			t.Fatalf("namespace %s not left behind by the crash: %q", n, left)
		}
	}
	removed, err := igdtest.CleanStale(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !slices.Contains(removed, n) {
			t.Fatalf("CleanStale removed %q, want %s among them", removed, n)
		}
	}
	list := netnsList(t)
	for _, n := range names {
		if slices.Contains(list, n) {
			t.Fatalf("namespace %s still listed after CleanStale: %q", n, list)
		}
	}
}

// TestUDPDataPath checks a UDP mapping end to end: the internet host's
// datagram to the router's WAN port reaches the node's socket, and the reply
// comes back through the NAT.
func TestUDPDataPath(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	pc, err := lab.Nodes[0].ListenPacket(ctx, "udp4", "192.0.2.10:30053")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30053", "8053", "UDP")

	c, err := lab.InternetDialContext(ctx, "udp4", lab.ExternalIP.String()+":8053")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := pc.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Write([]byte("ping"))
	if err != nil {
		t.Fatal(err)
	}

	buf := make([]byte, 64)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("%v; datagram did not reach the node; miniupnpd log:\n%s", err, lab.Log())
	}
	if string(buf[:n]) != "ping" {
		t.Fatalf("the node got %q, want %q", buf[:n], "ping")
	}
	if got := from.(*net.UDPAddr).IP.String(); got != lab.InternetIP.String() {
		t.Fatalf("the source is not the internet host: %s, want %s", got, lab.InternetIP)
	}
	_, err = pc.WriteTo([]byte("pong"), from)
	if err != nil {
		t.Fatal(err)
	}
	n, err = c.Read(buf)
	if err != nil {
		t.Fatalf("%v; reply did not come back", err)
	}
	if string(buf[:n]) != "pong" {
		t.Fatalf("the internet host got %q, want %q", buf[:n], "pong")
	}
}

// TestConsoleLog: by default the daemon's /dev/console discards, in a mount
// namespace of its own (nothing shows in ours), while its debug log still
// reaches Lab.Log; with ConsoleLog it writes to the machine's console as the
// shared recipe does.
func TestConsoleLog(t *testing.T) {
	consoleMount := func(pid int) bool {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[4] == "/dev/console" {
				return true
			}
		}
		return false
	}
	hostHadIt := consoleMount(os.Getpid())
	for _, tc := range []struct {
		name      string
		console   bool
		wantMount bool
	}{
		{name: "default", wantMount: true},
		{name: "ConsoleLog", console: true, wantMount: hostHadIt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{ConsoleLog: tc.console})
			if got := consoleMount(lab.PID()); got != tc.wantMount {
				t.Errorf("a /dev/console mount in the daemon's namespace: %v, want %v", got, tc.wantMount)
			}
			if got := consoleMount(os.Getpid()); got != hostHadIt {
				t.Errorf("a /dev/console mount in the test's namespace: %v, want %v", got, hostHadIt)
			}
			ctx := testContext(t)
			out, err := lab.Upnpc(ctx, 0, "-l")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(lab.Log(), "HTTP REQUEST") {
				t.Errorf("the daemon's debug log is not in Lab.Log (no %q):\n%s", "HTTP REQUEST", lab.Log())
			}
		})
	}
}

// TestClientConfig: a client built from ClientConfig(i) finds the router
// from node i, by the root description URL and by SSDP, sees it as the
// node's default gateway, and knows the node's own address.
func TestClientConfig(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	for _, tc := range []struct {
		name  string
		byURL bool
	}{{"root description URL", true}, {"SSDP", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			cfg := lab.ClientConfig(1)
			if !tc.byURL {
				cfg.RootDescURL = ""
			}
			c, err := igd.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			gw, err := c.Discover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if gw.Addr != lab.RouterLAN {
				t.Errorf("gateway address %v, want the router's %v", gw.Addr, lab.RouterLAN)
			}
			if gw.ExternalIP != lab.ExternalIP {
				t.Errorf("gateway external IP %v, want %v", gw.ExternalIP, lab.ExternalIP)
			}
			if !gw.OnDefaultGateway {
				t.Error("OnDefaultGateway = false, want true: the router is the node's default gateway")
			}
			self, err := c.LocalAddr(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if self != lab.Nodes[1].Addr {
				t.Errorf("LocalAddr = %v, want node 1's %v", self, lab.Nodes[1].Addr)
			}
		})
	}
}

// TestDaemonize: a daemonised miniupnpd serves, logs no debug lines, is
// rebooted and stopped like the foreground one, and leaves no process.
func TestDaemonize(t *testing.T) {
	var last int // registered first, so it runs after the lab's own cleanup
	t.Cleanup(func() {
		if !exited(last) {
			t.Errorf("daemon %d left running after the lab stopped", last)
		}
	})
	lab := igdtest.Start(t, igdtest.Options{Daemonize: true})
	ctx := testContext(t)
	pid := lab.PID()
	if pid == 0 {
		t.Fatal("lab.PID() = 0, want the daemon's PID")
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cmdline), "miniupnpd") {
		t.Errorf("PID names the daemon: its command line %q lacks miniupnpd", cmdline)
	}
	if slices.Contains(strings.Split(string(cmdline), "\x00"), "-d") {
		t.Errorf("the daemon runs without -d: its command line %q has it", cmdline)
	}

	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	out := upnpc(ctx, t, lab, 0, "-l")
	if !listed(out, "TCP", "8080->192.0.2.10:30080") {
		t.Fatalf("mapping not listed:\n%s", out)
	}
	if strings.Contains(lab.Log(), "HTTP REQUEST") {
		t.Errorf("debug lines (%q) from a daemonised router:\n%s", "HTTP REQUEST", lab.Log())
	}

	lab.Reboot(t)
	if lab.PID() == pid {
		t.Fatalf("Reboot did not start a new daemon: PID still %d", pid)
	}
	if !exited(pid) {
		t.Errorf("the old daemon %d is still running", pid)
	}
	out = upnpc(ctx, t, lab, 0, "-l")
	if listed(out, "TCP", "8080->192.0.2.10:30080") {
		t.Fatalf("mapping survived Reboot:\n%s", out)
	}

	last = lab.PID()
}

// exited reports whether pid is gone or a zombie (a daemonised process is
// reparented to the machine's init, which may not reap it at once).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}
