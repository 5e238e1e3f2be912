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
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)
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
	require.NoError(t, err, "upnpc output:\n%s\nminiupnpd log:\n%s", out, lab.Log())
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
		assert.Equal(t, tc.want, listed(out, tc.proto, tc.mapping), "%s %s", tc.proto, tc.mapping)
	}
}

func TestMappingAndDataPath(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	serveHTTP(t, lab.Nodes[0], "192.0.2.10:30080", "hello from node 0")
	url := "http://" + lab.ExternalIP.String() + ":8080/"

	_, err := lab.InternetGet(ctx, url)
	require.Error(t, err, "the WAN port answered before any mapping existed")

	out := upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	require.Contains(t, out, "is redirected to internal 192.0.2.10:30080", "upnpc -a output")
	out = upnpc(ctx, t, lab, 0, "-l")
	require.True(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "upnpc -l does not list the mapping:\n%s", out)

	body, err := lab.InternetGet(ctx, url)
	require.NoError(t, err, "miniupnpd log:\n%s", lab.Log())
	require.Equal(t, "hello from node 0", body)
}

func TestRestartKeepsRebootWipes(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	serveHTTP(t, lab.Nodes[0], "192.0.2.10:30080", "still here")
	url := "http://" + lab.ExternalIP.String() + ":8080/"
	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")

	pid := lab.PID()
	lab.Restart(t)
	require.NotEqual(t, pid, lab.PID(), "Restart did not start a new miniupnpd")
	out := upnpc(ctx, t, lab, 0, "-l")
	require.True(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "mapping lost by Restart:\n%s", out)
	body, err := lab.InternetGet(ctx, url)
	require.NoError(t, err)
	require.Equal(t, "still here", body)

	lab.Reboot(t)
	out = upnpc(ctx, t, lab, 0, "-l")
	require.False(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "mapping survived Reboot:\n%s", out)
	_, err = lab.InternetGet(ctx, url)
	require.Error(t, err, "data path survived Reboot")

	// The rebooted router works: the mapping can be made again.
	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	body, err = lab.InternetGet(ctx, url)
	require.NoError(t, err)
	require.Equal(t, "still here", body)
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
			require.True(t, listed(out, "TCP", ext+"->192.0.2.10:30080"), "own mapping missing:\n%s", out)
			other := fmt.Sprint(8080 + 1 - i)
			require.False(t, listed(out, "TCP", other+"->192.0.2.10:30080"), "the other lab's mapping is visible:\n%s", out)
			body, err := lab.InternetGet(ctx, "http://"+lab.ExternalIP.String()+":"+ext+"/")
			require.NoError(t, err)
			require.Equal(t, want, body)
		})
	}
}

func TestTwoLabsAreIsolated(t *testing.T) {
	a := igdtest.Start(t, igdtest.Options{})
	b := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	require.NotEqual(t, a.RouterNS, b.RouterNS)
	require.NotEqual(t, a.Nodes[0].Name, b.Nodes[0].Name)
	require.NotEqual(t, a.PID(), b.PID())

	upnpc(ctx, t, a, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	out := upnpc(ctx, t, b, 0, "-l")
	require.False(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "lab b sees lab a's mapping:\n%s", out)
	out = upnpc(ctx, t, a, 0, "-l")
	require.True(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "lab a lost its mapping:\n%s", out)
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
			require.Len(t, lab.Nodes, 2)
			require.Equal(t, "192.0.2.11", lab.Nodes[1].Addr.String())

			out, err := lab.Upnpc(ctx, 0, "-a", "192.0.2.11", "30081", "8081", "TCP")
			if tc.wantForOther {
				require.NoError(t, err, "upnpc output:\n%s", out)
			} else {
				require.Error(t, err, "AddPortMapping to another host succeeded:\n%s", out)
				require.Contains(t, out, "failed with code 718", "AddPortMapping to another host should fail with 718")
			}
			out = upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
			require.Contains(t, out, "is redirected to internal 192.0.2.10:30080", "mapping to itself must work")

			out = upnpc(ctx, t, lab, 0, "-l")
			require.True(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "own mapping missing:\n%s", out)
			require.Equal(t, tc.wantForOther, listed(out, "TCP", "8081->192.0.2.11:30081"), "mapping to another host:\n%s", out)
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
			require.NoError(t, err)
			resp, err := lab.Nodes[0].HTTPClient().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Contains(t, string(body), tc.want)
			require.NotContains(t, string(body), tc.dontWant)
		})
	}
}

// TestNodeNamespace checks that Do runs inside the node's namespace and
// leaves the caller's thread where it was.
func TestNodeNamespace(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	for _, n := range lab.Nodes {
		var inside []string
		require.NoError(t, n.Do(func() error {
			var err error
			inside, err = addrs()
			return err
		}))
		require.Contains(t, inside, n.Addr.String()+"/24")
		require.Len(t, inside, 2, "node %s: %v", n.Name, inside) // lo and eth0

		outside, err := addrs()
		require.NoError(t, err)
		require.NotContains(t, outside, n.Addr.String()+"/24", "Do leaked the namespace into the caller")
	}

	wantErr := errors.New("from fn")
	require.ErrorIs(t, lab.Nodes[0].Do(func() error { return wantErr }), wantErr)
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
	require.NoError(t, err)
	defer pc.Close()

	msg := "M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 1\r\n" +
		"ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n\r\n"
	dst := &net.UDPAddr{IP: net.IPv4(239, 255, 255, 250), Port: 1900}
	require.NoError(t, pc.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = pc.WriteTo([]byte(msg), dst)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	n, from, err := pc.ReadFrom(buf)
	require.NoError(t, err, "no SSDP answer; miniupnpd log:\n%s", lab.Log())
	require.Equal(t, lab.RouterLAN.String(), from.(*net.UDPAddr).IP.String())
	require.Contains(t, string(buf[:n]), lab.RootDescURL)
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
		require.NotZero(t, pid)
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		require.NoError(t, err, "miniupnpd not running during the test")
		require.Equal(t, "miniupnpd\n", string(comm), "PID is not the daemon's")
		require.Subset(t, netnsList(t), names)
	})
	require.NotEmpty(t, names)
	list := netnsList(t)
	for _, n := range names {
		require.NotContains(t, list, n, "namespace left behind")
	}
	require.True(t, processGone(pid), "miniupnpd (pid %d) still running", pid)
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
	require.NoError(t, err)
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
	require.NoError(t, cmd.Run())
	dead := cmd.Process.Pid

	stale := fmt.Sprintf("igdt%d-1-abcdef-r", dead)
	live := fmt.Sprintf("igdt%d-999-abcdef-r", unix.Getpid())
	foreign := fmt.Sprintf("other%d-1-abcdef-r", dead) // not ours: never touched
	for _, ns := range []string{stale, live, foreign} {
		require.NoError(t, exec.Command("ip", "netns", "add", ns).Run())
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}

	removed, err := igdtest.CleanStale(testContext(t))
	require.NoError(t, err)
	require.Contains(t, removed, stale)
	require.NotContains(t, removed, live)
	require.NotContains(t, removed, foreign)
	list := netnsList(t)
	require.NotContains(t, list, stale)
	require.Contains(t, list, live)
	require.Contains(t, list, foreign)
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
	require.Error(t, err, "helper in mode %s should not succeed:\n%s", mode, out)
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "LAB "); ok {
			_, err := fmt.Sscanf(rest, "%d", &pid)
			require.NoError(t, err)
			names = strings.Split(strings.Fields(rest)[1], ",")
		}
	}
	require.NotZero(t, pid, "helper did not report its lab:\n%s", out)
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
	require.True(t, processGone(pid), "miniupnpd (pid %d) outlived its failed test", pid)
	list := netnsList(t)
	for _, n := range names {
		require.NotContains(t, list, n, "namespace left behind by a failed test")
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
	require.Subset(t, netnsList(t), names)
	removed, err := igdtest.CleanStale(testContext(t))
	require.NoError(t, err)
	require.Subset(t, removed, names)
	list := netnsList(t)
	for _, n := range names {
		require.NotContains(t, list, n)
	}
}

// TestUDPDataPath checks a UDP mapping end to end: the internet host's
// datagram to the router's WAN port reaches the node's socket, and the reply
// comes back through the NAT.
func TestUDPDataPath(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	pc, err := lab.Nodes[0].ListenPacket(ctx, "udp4", "192.0.2.10:30053")
	require.NoError(t, err)
	defer pc.Close()
	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30053", "8053", "UDP")

	c, err := lab.InternetDialContext(ctx, "udp4", lab.ExternalIP.String()+":8053")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	require.NoError(t, pc.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)

	buf := make([]byte, 64)
	n, from, err := pc.ReadFrom(buf)
	require.NoError(t, err, "datagram did not reach the node; miniupnpd log:\n%s", lab.Log())
	require.Equal(t, "ping", string(buf[:n]))
	require.Equal(t, lab.InternetIP.String(), from.(*net.UDPAddr).IP.String(), "the source is not the internet host")
	_, err = pc.WriteTo([]byte("pong"), from)
	require.NoError(t, err)
	n, err = c.Read(buf)
	require.NoError(t, err, "reply did not come back")
	require.Equal(t, "pong", string(buf[:n]))
}

// TestConsoleLog: by default the daemon's /dev/console discards, in a mount
// namespace of its own (nothing shows in ours), while its debug log still
// reaches Lab.Log; with ConsoleLog it writes to the machine's console as the
// shared recipe does.
func TestConsoleLog(t *testing.T) {
	consoleMount := func(pid int) bool {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		require.NoError(t, err)
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
			assert.Equal(t, tc.wantMount, consoleMount(lab.PID()), "a /dev/console mount in the daemon's namespace")
			assert.Equal(t, hostHadIt, consoleMount(os.Getpid()), "a /dev/console mount in the test's namespace")
			ctx := testContext(t)
			out, err := lab.Upnpc(ctx, 0, "-l")
			require.NoError(t, err, out)
			assert.Contains(t, lab.Log(), "HTTP REQUEST", "the daemon's debug log in Lab.Log")
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
			require.NoError(t, err)
			gw, err := c.Discover(ctx)
			require.NoError(t, err)
			assert.Equal(t, lab.RouterLAN, gw.Addr)
			assert.Equal(t, lab.ExternalIP, gw.ExternalIP)
			assert.True(t, gw.OnDefaultGateway, "the router is the node's default gateway")
			self, err := c.LocalAddr(ctx)
			require.NoError(t, err)
			assert.Equal(t, lab.Nodes[1].Addr, self)
		})
	}
}

// TestDaemonize: a daemonised miniupnpd serves, logs no debug lines, is
// rebooted and stopped like the foreground one, and leaves no process.
func TestDaemonize(t *testing.T) {
	var last int // registered first, so it runs after the lab's own cleanup
	t.Cleanup(func() { assert.True(t, exited(last), "daemon %d left running after the lab stopped", last) })
	lab := igdtest.Start(t, igdtest.Options{Daemonize: true})
	ctx := testContext(t)
	pid := lab.PID()
	require.NotZero(t, pid)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(t, err)
	assert.Contains(t, string(cmdline), "miniupnpd", "PID names the daemon")
	assert.NotContains(t, strings.Split(string(cmdline), "\x00"), "-d", "the daemon runs without -d")

	upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	out := upnpc(ctx, t, lab, 0, "-l")
	require.True(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "mapping not listed:\n%s", out)
	assert.NotContains(t, lab.Log(), "HTTP REQUEST", "debug lines from a daemonised router")

	lab.Reboot(t)
	require.NotEqual(t, pid, lab.PID(), "Reboot started a new daemon")
	assert.True(t, exited(pid), "the old daemon %d is still running", pid)
	out = upnpc(ctx, t, lab, 0, "-l")
	require.False(t, listed(out, "TCP", "8080->192.0.2.10:30080"), "mapping survived Reboot:\n%s", out)

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
