package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ccmkit/ccmkit/internal/upnp"
)

// OpenWrt's upnpd init script reads a perm_rule's ext_ports as one port or
// one N-M (or N:M) range: every OpenWrt rule the guides give is one of those.
func TestOpenWrtHintsAreOneRangePerRule(t *testing.T) {
	setting := regexp.MustCompile(`ext_ports[ =]'?([^;'\n,)]*)'?`)
	oneRange := regexp.MustCompile(`^(\d+|\$p|\d+[-:]\d+)$`)
	for _, file := range []string{"README.md", standaloneDir + "/README.md"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range setting.FindAllStringSubmatch(string(data), -1) {
			n++
			if v := strings.TrimSpace(m[1]); !oneRange.MatchString(v) && !strings.Contains(m[0], "is not read") {
				t.Errorf("%s: %q: OpenWrt's init script reads one port or one N-M range per rule", file, m[0])
			}
		}
		if n == 0 {
			t.Errorf("%s gives no OpenWrt rule for a port below 1024", file)
		}
	}
}

// The README tells one figure for miniupnpd's listing crash, the one the
// client guards against (upnp.SafeListWidth), and no other.
func TestListingCrashIsOneFigure(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "| `GetListOfPortMappings` overflows") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("README.md has no row for the listing crash")
	}
	want := strconv.Itoa(upnp.SafeListWidth)
	for _, m := range regexp.MustCompile(`(?:[<>≤≥] |under |more than |at most )(\d+) mappings`).FindAllStringSubmatch(row, -1) {
		if m[1] != want {
			t.Errorf("the listing-crash row says %q; the crash is past %s mappings (upnp.SafeListWidth)", m[0], want)
		}
	}
}
