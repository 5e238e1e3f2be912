package igdtest

import "time"

// Profiles: Options that emulate a router as shipped. Each says which vendor
// file its settings were read from; only what miniupnpd.conf can express is
// taken, and never a lease file (the lab keeps none, see Lab.Restart). Set
// more fields on the result as a test needs.
//
// A router that accepts only permanent leases (725
// OnlyPermanentLeasesSupported for any other) cannot be emulated: miniupnpd
// has no setting for it. The fake router's fake.RouterConfig.OnlyPermanentLeases
// covers that case.

// OpenWrtDefault is miniupnpd as OpenWrt installs it, read from
// openwrt/packages net/miniupnpd/files/upnpd.config (the UCI defaults) and
// net/miniupnpd/files/miniupnpd.init (which turns them into miniupnpd.conf),
// at commit 6f657eb190aeb2c64a7413c5f395696f6019adb2 (package 2.3.9):
// secure_mode=yes, force_igd_desc_v1=yes (option igdv1 1), NAT-PMP and PCP
// on, system_uptime=yes, IPv6 on, download 1024 and upload 512 kB/s written
// as bitrate_down=8388608 and bitrate_up=4194304, and the two permission
// rules it writes: any LAN address may map external ports 1024-65535 to
// internal ports 1024-65535 ("Allow high ports"), everything else is denied
// ("Default deny"). With secure mode a client still maps only to itself.
//
// Not taken: the lease files, a random uuid, and the fw4 table and chain
// names (the lab has its own ruleset).
func OpenWrtDefault() Options {
	return Options{
		SecureMode:  true,
		ForceIGDv1:  true,
		BitrateDown: 1024 * 1024 * 8,
		BitrateUp:   512 * 1024 * 8,
		Permissions: []string{
			"allow 1024-65535 0.0.0.0/0 1024-65535 #Allow high ports",
			"deny 0-65535 0.0.0.0/0 0-65535 #Default deny",
		},
	}
}

// HighPortsOnly is a router that lets any LAN host map, to any host, only
// external ports 1024-65535 to internal ports 1024-65535, with secure mode
// off and an IGD:2 description. The rule is the one miniupnpd's sample
// configuration ships (miniupnp/miniupnp miniupnpd/miniupnpd.conf, tag
// miniupnpd_2_3_1: "allow 1024-65535 192.168.0.0/24 1024-65535" and
// "deny 0-65535 0.0.0.0/0 0-65535"), widened to every LAN address as
// OpenWrt does; a port below 1024 is refused with 606.
func HighPortsOnly() Options {
	return Options{
		Permissions: []string{
			"allow 1024-65535 0.0.0.0/0 1024-65535",
			"deny 0-65535 0.0.0.0/0 0-65535",
		},
	}
}

// TableWipe is a router configured to delete idle mappings:
// clean_ruleset_threshold and clean_ruleset_interval, which miniupnpd's
// sample configuration sets (miniupnp/miniupnp miniupnpd/miniupnpd.conf,
// tag miniupnpd_2_3_1: clean_ruleset_interval=600, with
// clean_ruleset_threshold=10 suggested; Debian's /etc/miniupnpd/miniupnpd.conf
// ships both commented out). TableWipe(10, 600*time.Second) gives that
// file's values. The lab's miniupnpd 2.3.1 (nftables) deletes nothing with
// them, a bug fixed in 2.3.10: see Options.CleanRulesetInterval. A router
// that does wipe idle mappings is the fake router's to emulate.
func TableWipe(threshold int, interval time.Duration) Options {
	return Options{
		CleanRulesetThreshold: threshold,
		CleanRulesetInterval:  interval,
	}
}

// BehindCGNAT is the lab's default router with its WAN on a carrier-grade
// NAT's shared address (Options.CGNAT): what an ISP that gives no public
// IPv4 address hands a customer's router. Taken from no vendor file: any
// router's defaults meet it. See Options.CGNAT for what miniupnpd answers.
func BehindCGNAT() Options {
	return Options{CGNAT: true}
}
