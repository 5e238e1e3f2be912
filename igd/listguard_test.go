package igd

import (
	"fmt"
	"slices"
	"testing"
)

func TestCrashesOnLongLists(t *testing.T) {
	tests := []struct {
		server string
		want   bool
	}{
		{"Debian/12 UPnP/1.1 MiniUPnPd/2.3.1", true},
		{"ccmkit-fake UPnP/1.1 MiniUPnPd/2.3.1", true},
		{"OpenWrt/22.03 UPnP/1.1 MiniUPnPd/2.3.3", true},
		{"Linux UPnP/1.0 miniupnpd/1.9", true},
		{"Linux UPnP/1.1 MiniUPnPd/2.3", true},
		{"Linux UPnP/1.1 MiniUPnPd", true},
		{"Linux UPnP/1.1 MiniUPnPd/", true},
		{"Linux UPnP/1.1 MiniUPnPd/unknown", true},
		{"OpenWrt UPnP/1.1 MiniUPnPd/2.3.4", false},
		{"OpenWrt UPnP/1.1 MiniUPnPd/2.3.4-rc1", false},
		{"OpenWrt UPnP/1.1 MiniUPnPd/2.3.6", false},
		{"OpenWrt UPnP/1.1 MiniUPnPd/3.0", false},
		{"Linux/3.4 UPnP/1.0 Broadcom UPnP SDK/1.0", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := crashesOnLongLists(tt.server); got != tt.want {
			t.Errorf("crashesOnLongLists(%q) = %v, want %v", tt.server, got, tt.want)
		}
	}
}

func TestPlanRanges(t *testing.T) {
	seq := func(first, n int) []uint16 {
		out := make([]uint16, n)
		for i := range out {
			out[i] = uint16(first + i)
		}
		return out
	}
	all := PortRange{First: 0, Last: 65535}
	tests := []struct {
		name  string
		known []uint16
		whole PortRange
		per   int
		want  []PortRange
	}{
		{"nothing known", nil, all, 64, []PortRange{all}},
		{"fewer than per", seq(100, 10), all, 64, []PortRange{all}},
		{"exactly per", seq(100, 64), all, 64, []PortRange{all}},
		{"one over", seq(100, 65), all, 64, []PortRange{{0, 163}, {164, 65535}}},
		{"three parts", seq(100, 130), all, 64, []PortRange{{0, 163}, {164, 227}, {228, 65535}}},
		{"only the ports inside whole count", seq(100, 130), PortRange{First: 150, Last: 200}, 64, []PortRange{{150, 200}}},
		{"ends at 65535", seq(65535-99, 100), PortRange{First: 65000, Last: 65535}, 64, []PortRange{{65000, 65499}, {65500, 65535}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planRanges(tt.known, tt.whole, tt.per)
			if !slices.Equal(got, tt.want) {
				t.Errorf("planRanges() (-want +got):\n-%v\n+%v", tt.want, got)
			}
			for _, r := range got {
				n := 0
				for _, p := range tt.known {
					if r.contains(p) {
						n++
					}
				}
				if n > tt.per || r.First > r.Last {
					t.Errorf("range %s holds %d known ports, want at most %d", fmt.Sprint(r), n, tt.per)
				}
			}
		})
	}
}
