package igdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// staleName matches the namespace names Start makes: prefix, owner pid,
// counter, random hex, role. Nothing else is ever touched by CleanStale.
var staleName = regexp.MustCompile(`^` + nsPrefix + `([0-9]+)-[0-9]+-[0-9a-f]+-(r|i|n[0-9]+)$`)

// CleanStale deletes the network namespaces left behind by labs of test
// processes that died before their cleanups ran (killed by a timeout or a
// signal), and returns their names. It touches only namespaces named by this
// package whose owner process no longer exists, and in them only kills
// miniupnpd processes whose command line names that lab. Namespaces of labs
// still running, in this or another process, are left alone.
//
// Files in the dead test's temporary directory are not removed. Call it from
// TestMain or by hand (it needs root).
func CleanStale(ctx context.Context) ([]string, error) {
	tl, err := staleTools()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("igdtest: clean stale labs: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		m := staleName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || processAlive(pid) {
			continue
		}
		ns := e.Name()
		id := strings.TrimSuffix(ns, "-"+m[2])
		if err := killStaleDaemons(ctx, tl, ns, id); err != nil {
			errs = append(errs, err)
			continue
		}
		out, err := exec.CommandContext(ctx, tl.ip, "netns", "del", ns).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("igdtest: delete stale namespace %s: %w: %s", ns, err, bytes.TrimSpace(out)))
			continue
		}
		removed = append(removed, ns)
	}
	return removed, errors.Join(errs...)
}

// staleTools finds ip, the only program CleanStale runs.
func staleTools() (tools, error) {
	ip, err := lookPath("ip")
	if err != nil {
		return tools{}, fmt.Errorf("igdtest: clean stale labs: %w", err)
	}
	return tools{ip: ip}, nil
}

// processAlive reports whether a process with this pid exists. EPERM means it
// exists but belongs to someone else.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// killStaleDaemons kills the processes in namespace ns that are a miniupnpd
// of lab id (their config file name holds the id).
func killStaleDaemons(ctx context.Context, tl tools, ns, id string) error {
	out, err := exec.CommandContext(ctx, tl.ip, "netns", "pids", ns).Output()
	if err != nil {
		return fmt.Errorf("igdtest: list processes in stale namespace %s: %w", ns, err)
	}
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "miniupnpd") || !bytes.Contains(cmdline, []byte("miniupnpd-"+id+".conf")) {
			continue
		}
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("igdtest: kill stale miniupnpd %d in %s: %w", pid, ns, err)
		}
	}
	return nil
}
