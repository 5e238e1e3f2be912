package fake

import "strings"

// rootDescription returns the root description a Server serves for service:
// for WANIPConnection2 and WANIPConnection1 the one miniupnpd 2.3.1 serves
// (default, and with force_igd_desc_v1=yes), byte for byte (see
// testdata/miniupnpd/*/rootDesc.http); for WANPPPConnection1 the IGD:1 one
// with the connection service renamed, the shape PPPoE routers use. The
// description has no URLBase, so clients resolve its URLs against the URL
// they fetched it from.
func rootDescription(service UPnPService) []byte {
	v := "1"
	if service == WANIPConnection2 {
		v = "2"
	}
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\"?>\r\n")
	b.WriteString(`<root xmlns="urn:schemas-upnp-org:device-1-0" configId="1337"><specVersion><major>1</major><minor>1</minor></specVersion>`)
	b.WriteString(`<device><deviceType>urn:schemas-upnp-org:device:InternetGatewayDevice:` + v + `</deviceType>`)
	b.WriteString(`<friendlyName>Debian router</friendlyName><manufacturer>Debian</manufacturer><manufacturerURL>http://www.debian.org/</manufacturerURL><modelDescription>Debian router</modelDescription><modelName>Debian router</modelName><modelNumber>1</modelNumber><modelURL>http://www.debian.org/</modelURL><serialNumber>00000000</serialNumber><UDN>uuid:3d3cec3a-8cf0-11e0-98ee-001a6bd2d07d</UDN>`)
	b.WriteString(`<serviceList>`)
	writeService(&b, "urn:schemas-upnp-org:service:Layer3Forwarding:1", "urn:upnp-org:serviceId:L3Forwarding1", "L3F", "L3F")
	if v == "2" {
		writeService(&b, "urn:schemas-upnp-org:service:DeviceProtection:1", "urn:upnp-org:serviceId:DeviceProtection1", "DP", "DP")
	}
	b.WriteString(`</serviceList>`)
	b.WriteString(`<deviceList><device><deviceType>urn:schemas-upnp-org:device:WANDevice:` + v + `</deviceType>`)
	b.WriteString(`<friendlyName>WANDevice</friendlyName><manufacturer>MiniUPnP</manufacturer><manufacturerURL>http://miniupnp.free.fr/</manufacturerURL><modelDescription>WAN Device</modelDescription><modelName>WAN Device</modelName><modelNumber>20221221</modelNumber><modelURL>http://miniupnp.free.fr/</modelURL><serialNumber>00000000</serialNumber><UDN>uuid:3d3cec3a-8cf0-11e0-98ee-001a6bd2d07e</UDN><UPC>000000000000</UPC>`)
	b.WriteString(`<serviceList>`)
	writeService(&b, "urn:schemas-upnp-org:service:WANCommonInterfaceConfig:1", "urn:upnp-org:serviceId:WANCommonIFC1", "WANCfg", "CmnIfCfg")
	b.WriteString(`</serviceList>`)
	b.WriteString(`<deviceList><device><deviceType>urn:schemas-upnp-org:device:WANConnectionDevice:` + v + `</deviceType>`)
	b.WriteString(`<friendlyName>WANConnectionDevice</friendlyName><manufacturer>MiniUPnP</manufacturer><manufacturerURL>http://miniupnp.free.fr/</manufacturerURL><modelDescription>MiniUPnP daemon</modelDescription><modelName>MiniUPnPd</modelName><modelNumber>20221221</modelNumber><modelURL>http://miniupnp.free.fr/</modelURL><serialNumber>00000000</serialNumber><UDN>uuid:3d3cec3a-8cf0-11e0-98ee-001a6bd2d07f</UDN><UPC>000000000000</UPC>`)
	b.WriteString(`<serviceList>`)
	switch service {
	case WANPPPConnection1:
		writeService(&b, string(service), "urn:upnp-org:serviceId:WANPPPConn1", "WANPPPCn", "PPPConn")
	default:
		writeService(&b, string(service), "urn:upnp-org:serviceId:WANIPConn1", "WANIPCn", "IPConn")
	}
	if v == "2" {
		writeService(&b, "urn:schemas-upnp-org:service:WANIPv6FirewallControl:1", "urn:upnp-org:serviceId:WANIPv6Firewall1", "WANIP6FC", "IP6FCtl")
	}
	b.WriteString(`</serviceList></device></deviceList></device></deviceList><presentationURL>http://192.0.2.1/</presentationURL></device></root>`)
	return []byte(b.String())
}

// writeService writes one <service> element in miniupnpd's layout: the
// description at /SCPD.xml, control at /ctl/CTL, events at /evt/CTL.
func writeService(b *strings.Builder, typ, id, scpd, ctl string) {
	b.WriteString(`<service><serviceType>` + typ + `</serviceType><serviceId>` + id + `</serviceId><SCPDURL>/` + scpd + `.xml</SCPDURL><controlURL>/ctl/` + ctl + `</controlURL><eventSubURL>/evt/` + ctl + `</eventSubURL></service>`)
}
