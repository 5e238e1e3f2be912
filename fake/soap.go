package fake

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// maxRequestBody bounds a SOAP request body. Real requests are well under
// 2 KiB; miniupnpd itself refuses much smaller bodies than this.
const maxRequestBody = 64 << 10

// maxArgs bounds the number of arguments read from one request; the largest
// action (AddAnyPortMapping) has eight.
const maxArgs = 32

const soapEnvNS = "http://schemas.xmlsoap.org/soap/envelope/"

// soapRequest is a parsed SOAP action call.
type soapRequest struct {
	// Service is the service type named in the SOAPAction header.
	Service string
	// Action is the action name, from the SOAPAction header.
	Action string
	// Args holds the action's arguments by element name. A repeated
	// argument keeps its first value.
	Args map[string]string
}

// errInvalidAction and errInvalidArgs are the parse failures, answered with
// UPnP 401 and 402 as miniupnpd does.
var (
	errInvalidAction = errors.New("invalid SOAPAction")
	errInvalidArgs   = errors.New("invalid SOAP body")
)

// parseSOAPAction reads a SOAPAction header value, such as
// `"urn:schemas-upnp-org:service:WANIPConnection:2#AddPortMapping"` (quotes
// optional), into its service type and action name.
func parseSOAPAction(h string) (service, action string, err error) {
	h = strings.TrimSpace(h)
	if len(h) >= 2 && h[0] == '"' && h[len(h)-1] == '"' {
		h = h[1 : len(h)-1]
	}
	service, action, ok := strings.Cut(h, "#")
	if !ok || service == "" || action == "" || !isName(action) {
		return "", "", errInvalidAction
	}
	return service, action, nil
}

// isName reports whether s is a plausible action name: ASCII letters and
// digits only.
func isName(s string) bool {
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return len(s) <= 64
}

// parseSOAPRequest parses a SOAP request: the SOAPAction header and an
// envelope whose body holds one element named after the action, whose child
// elements are the arguments. It never panics; any malformed input is
// errInvalidAction or errInvalidArgs.
func parseSOAPRequest(soapAction string, body []byte) (*soapRequest, error) {
	service, action, err := parseSOAPAction(soapAction)
	if err != nil {
		return nil, err
	}
	args, err := parseSOAPBody(action, body)
	if err != nil {
		return nil, err
	}
	return &soapRequest{Service: service, Action: action, Args: args}, nil
}

// parseSOAPBody walks the XML tokens of body. It accepts any namespace
// prefixes, requires Envelope > Body > action element, and reads each child
// of the action element as an argument whose value is its character data.
func parseSOAPBody(action string, body []byte) (map[string]string, error) {
	if len(body) > maxRequestBody {
		return nil, errInvalidArgs
	}
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	// Only UTF-8 (and ASCII) bodies: refuse other declared charsets rather
	// than guess.
	d.CharsetReader = func(charset string, r io.Reader) (io.Reader, error) {
		if strings.EqualFold(charset, "utf-8") || strings.EqualFold(charset, "us-ascii") {
			return r, nil
		}
		return nil, errInvalidArgs
	}
	var (
		depth   int // element depth: 1 Envelope, 2 Body, 3 action, 4 argument
		args    = map[string]string{}
		arg     string
		value   strings.Builder
		sawBody bool // a SOAP Body element was seen
		inBody  bool // the current depth-2 element is the SOAP Body
		sawAct  bool // the action element was seen
		inAct   bool // the current depth-3 element is the action
	)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, errInvalidArgs
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			switch depth {
			case 1:
				if t.Name.Local != "Envelope" || t.Name.Space != soapEnvNS {
					return nil, errInvalidArgs
				}
			case 2:
				if t.Name.Local == "Body" && t.Name.Space == soapEnvNS {
					if sawBody {
						return nil, errInvalidArgs
					}
					sawBody, inBody = true, true
				}
			case 3:
				if inBody && !sawAct {
					if t.Name.Local != action {
						return nil, errInvalidAction
					}
					sawAct, inAct = true, true
				}
			case 4:
				if inAct {
					arg = t.Name.Local
					value.Reset()
				}
			default:
				if depth > 16 {
					return nil, errInvalidArgs
				}
			}
		case xml.CharData:
			if depth == 4 {
				if value.Len()+len(t) > maxRequestBody {
					return nil, errInvalidArgs
				}
				value.Write(t)
			}
		case xml.EndElement:
			if depth == 4 && arg != "" && inAct {
				if _, dup := args[arg]; !dup {
					if len(args) >= maxArgs {
						return nil, errInvalidArgs
					}
					args[arg] = value.String()
				}
				arg = ""
			}
			switch depth {
			case 2:
				inBody = false
			case 3:
				inAct = false
			}
			depth--
		}
	}
	if !sawAct {
		return nil, errInvalidArgs
	}
	return args, nil
}

// soapFault returns miniupnpd's SOAP fault body for code, byte for byte: no
// XML declaration, no trailing newline, sent with HTTP 500.
func soapFault(code int, description string) []byte {
	var b bytes.Buffer
	b.WriteString(`<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" s:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body><s:Fault><faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring><detail><UPnPError xmlns="urn:schemas-upnp-org:control-1-0"><errorCode>`)
	b.WriteString(strconv.Itoa(code))
	b.WriteString(`</errorCode><errorDescription>`)
	b.WriteString(escapeText(description))
	b.WriteString(`</errorDescription></UPnPError></detail></s:Fault></s:Body></s:Envelope>`)
	return b.Bytes()
}

// soapArg is one output argument of a response, in order.
type soapArg struct {
	name, value string
	raw         bool // value is markup (a CDATA section): written as is
}

// soapResponse returns miniupnpd's success body for action of service with
// args (values escaped here). AddPortMapping's empty response is a
// self-closing element, as miniupnpd writes it.
func soapResponse(service, action string, args []soapArg) []byte {
	var b bytes.Buffer
	b.WriteString("<?xml version=\"1.0\"?>\r\n")
	b.WriteString(`<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" s:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body>`)
	b.WriteString(`<u:` + action + `Response xmlns:u="` + service + `"`)
	if action == "AddPortMapping" && len(args) == 0 {
		b.WriteString(`/>`)
	} else {
		b.WriteString(`>`)
		for _, a := range args {
			v := a.value
			if !a.raw {
				v = escapeText(v)
			}
			b.WriteString("<" + a.name + ">" + v + "</" + a.name + ">")
		}
		b.WriteString(`</u:` + action + `Response>`)
	}
	b.WriteString("</s:Body></s:Envelope>\r\n")
	return b.Bytes()
}

// escapeText escapes &, < and > as miniupnpd does (quotes are left alone,
// which is valid in character data).
func escapeText(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	return r.Replace(s)
}

// sentinelCodes are the codes a Server answers igd's sentinel errors with,
// so that a hook returning one gets the same answer through the real client
// as through a Client. igd.ErrNotSupported is 401, as a router answers an
// action it does not have.
var sentinelCodes = []struct {
	err  error
	code int
}{
	{igd.ErrNotAuthorized, upnp.CodeNotAuthorized},
	{igd.ErrInvalidArrayIndex, upnp.CodeInvalidArrayIndex},
	{igd.ErrNoSuchEntry, upnp.CodeNoSuchEntry},
	{igd.ErrConflict, upnp.CodeConflict},
	{igd.ErrSamePortValuesRequired, upnp.CodeSamePortValuesRequired},
	{igd.ErrOnlyPermanentLeases, upnp.CodeOnlyPermanentLeases},
	{igd.ErrNoPortMapsAvailable, upnp.CodeNoPortMapsAvailable},
	{igd.ErrNotSupported, upnp.CodeInvalidAction},
}

// faultFor returns the UPnP code and description to answer err with: the
// code of a *igd.UPnPError or of an igd sentinel error, 401/402 for parse
// errors, 501 otherwise.
func faultFor(err error) (int, string) {
	var ue *igd.UPnPError
	switch {
	case errors.As(err, &ue):
		desc := ue.Description
		if desc == "" {
			desc = errorDescription(ue.Code)
		}
		return ue.Code, desc
	case errors.Is(err, errInvalidAction):
		return upnp.CodeInvalidAction, errorDescription(upnp.CodeInvalidAction)
	case errors.Is(err, errInvalidArgs):
		return upnp.CodeInvalidArgs, errorDescription(upnp.CodeInvalidArgs)
	}
	for _, s := range sentinelCodes {
		if errors.Is(err, s.err) {
			return s.code, errorDescription(s.code)
		}
	}
	return upnp.CodeActionFailed, errorDescription(upnp.CodeActionFailed)
}
