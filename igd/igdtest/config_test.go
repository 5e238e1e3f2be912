package igdtest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// todayConfig is what config wrote for the zero Options before options were
// added: the zero value must keep rendering it exactly.
const todayConfig = `ext_ifname=wan0
listening_ip=lan0
port=5000
enable_natpmp=yes
enable_upnp=yes
secure_mode=no
system_uptime=yes
uuid=3d3cec3a-8cf0-11e0-98ee-001a6bd2d07d
allow 1024-65535 192.0.2.0/24 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
`

func TestConfigRendersOptions(t *testing.T) {
	// head and tail are todayConfig around the lines an option adds; each
	// case gives the lines between them.
	head := "ext_ifname=wan0\nlistening_ip=lan0\nport=5000\n"
	uuid := "system_uptime=yes\nuuid=3d3cec3a-8cf0-11e0-98ee-001a6bd2d07d\n"
	perms := "allow 1024-65535 192.0.2.0/24 1024-65535\ndeny 0-65535 0.0.0.0/0 0-65535\n"
	std := "enable_natpmp=yes\nenable_upnp=yes\nsecure_mode=no\n"
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"zero", Options{}, todayConfig},
		{"SecureMode", Options{SecureMode: true}, head + "enable_natpmp=yes\nenable_upnp=yes\nsecure_mode=yes\n" + uuid + perms},
		{"ForceIGDv1", Options{ForceIGDv1: true}, head + std + "force_igd_desc_v1=yes\n" + uuid + perms},
		{"Permissions", Options{Permissions: []string{"allow 80 192.0.2.10/32 80", "deny 0-65535 0.0.0.0/0 0-65535"}},
			head + std + uuid + "allow 80 192.0.2.10/32 80\ndeny 0-65535 0.0.0.0/0 0-65535\n"},
		{"empty Permissions", Options{Permissions: []string{}}, head + std + uuid},
		{"CleanRuleset", Options{CleanRulesetThreshold: 3, CleanRulesetInterval: 2 * time.Second},
			head + std + "clean_ruleset_threshold=3\nclean_ruleset_interval=2\n" + uuid + perms},
		{"DisableNATPMP", Options{DisableNATPMP: true}, head + "enable_natpmp=no\nenable_upnp=yes\nsecure_mode=no\n" + uuid + perms},
		{"PCPAllowThirdParty", Options{PCPAllowThirdParty: true}, head + std + "pcp_allow_thirdparty=yes\n" + uuid + perms},
		{"IPv6Disable", Options{IPv6Disable: true}, head + std + "ipv6_disable=yes\n" + uuid + perms},
		{"lifetimes", Options{MinLifetime: 60 * time.Second, MaxLifetime: time.Hour},
			head + std + "min_lifetime=60\nmax_lifetime=3600\n" + uuid + perms},
		{"bitrates", Options{BitrateUp: 4194304, BitrateDown: 8388608},
			head + std + "bitrate_up=4194304\nbitrate_down=8388608\n" + uuid + perms},
		{"CGNAT", Options{CGNAT: true}, todayConfig}, // addresses only
		{"OpenWrtDefault", OpenWrtDefault(), head + "enable_natpmp=yes\nenable_upnp=yes\nsecure_mode=yes\nforce_igd_desc_v1=yes\n" +
			"bitrate_up=4194304\nbitrate_down=8388608\n" + uuid +
			"allow 1024-65535 0.0.0.0/0 1024-65535 #Allow high ports\ndeny 0-65535 0.0.0.0/0 0-65535 #Default deny\n"},
		{"TableWipe", TableWipe(10, 600*time.Second), head + std + "clean_ruleset_threshold=10\nclean_ruleset_interval=600\n" + uuid + perms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if diff := cmp.Diff(strings.Split(tc.want, "\n"), strings.Split(config(tc.o), "\n")); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateNamesField(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		field string // named in the error
	}{
		{Options{Nodes: -1}, "Options.Nodes"},
		{Options{Nodes: maxNodes + 1}, "Options.Nodes"},
		{Options{Permissions: []string{"permit 1-2 0.0.0.0/0 1-2"}}, "Options.Permissions[0]"},
		{Options{Permissions: []string{"allow 1024-65535 0.0.0.0/0 1024-65535", "deny 0-65535"}}, "Options.Permissions[1]"},
		{Options{Permissions: []string{"allow 1 0.0.0.0/0 1\nsecure_mode=no"}}, "Options.Permissions[0]"},
		{Options{CleanRulesetThreshold: -1}, "Options.CleanRulesetThreshold"},
		{Options{CleanRulesetInterval: 1500 * time.Millisecond}, "Options.CleanRulesetInterval"},
		{Options{CleanRulesetInterval: -time.Second}, "Options.CleanRulesetInterval"},
		{Options{MinLifetime: 121 * time.Second}, "Options.MinLifetime"},
		{Options{MaxLifetime: 86401 * time.Second}, "Options.MaxLifetime"},
		{Options{MaxLifetime: 100 * time.Millisecond}, "Options.MaxLifetime"},
		{Options{MinLifetime: 60 * time.Second, MaxLifetime: 60 * time.Second}, "Options.MinLifetime"},
		{Options{MaxLifetime: 120 * time.Second}, "Options.MinLifetime"}, // default min 120 s
		{Options{BitrateUp: -1}, "Options.BitrateUp"},
	} {
		err := tc.o.validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("validate(%+v) = %v, want an error naming %s", tc.o, err, tc.field)
		}
	}
	for _, o := range []Options{{}, OpenWrtDefault(), HighPortsOnly(), TableWipe(2, time.Second), BehindCGNAT(),
		{MinLifetime: 120 * time.Second, MaxLifetime: 86400 * time.Second}, {MaxLifetime: 121 * time.Second}} {
		if err := o.validate(); err != nil {
			t.Errorf("validate(%+v) = %v, want nil", o, err)
		}
	}
}
