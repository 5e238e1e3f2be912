package igd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// Caps on what the client reads from a router or any LAN host. Discovery
// fetches from every host that answers SSDP, so without them any host could
// make the client read (and goupnp hold several copies of) an answer without
// end. Each is far above what real routers send (DESIGN.md has the sizes).
const (
	// maxDescriptionSize caps a root description.
	maxDescriptionSize = 1 << 20
	// maxListAnswerSize caps a GetListOfPortMappings answer: at most 1000
	// entries of eight short fields, with room for descriptions of any sane
	// length and double escaping.
	maxListAnswerSize = 4 << 20
	// maxSOAPAnswerSize caps every other SOAP answer: a handful of short
	// arguments, or a fault.
	maxSOAPAnswerSize = 64 << 10
	// maxSSDPAnswerSize caps an SSDP answer datagram. Larger datagrams are
	// ignored.
	maxSSDPAnswerSize = 2048
)

// answerTooLargeError reports an answer larger than the client reads. It
// matches ErrAnswerTooLarge.
type answerTooLargeError struct {
	// What was being read: "description", or the SOAP action.
	What string
	// URL is where the answer came from.
	URL string
	// Limit is the cap in bytes.
	Limit int64
}

// Error names what was read, from where, and the cap.
func (e *answerTooLargeError) Error() string {
	return fmt.Sprintf("igd: %s answer from %s is larger than the %s cap", e.What, e.URL, byteSize(e.Limit))
}

// Is makes errors.Is(err, ErrAnswerTooLarge) true.
func (e *answerTooLargeError) Is(target error) bool { return target == ErrAnswerTooLarge }

// byteSize formats n as KiB or MiB when it is a whole number of them.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d-byte", n)
}

// capTransport caps the body of every response it carries, by what the
// request asked for (answerCap). An answer over the cap fails with an
// *answerTooLargeError as soon as the cap is passed, or before any of it is
// read when its Content-Length says so; it is never silently truncated.
//
// goupnp reads SOAP answers itself and flattens the errors it meets into
// text, so the error is also recorded in the request's context when it
// carries a record (withOversizeRecord), for callError to return it typed.
type capTransport struct {
	next http.RoundTripper
}

func (t capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if isRedirect(resp.StatusCode) {
		// Refused here, not only in the client's CheckRedirect: the client
		// hands a 307 to a POST it cannot rewind back unfollowed, and its
		// caller (goupnp) would then report a bare status.
		resp.Body.Close()
		return nil, &redirectError{URL: req.URL.String(), Status: resp.Status, Location: resp.Header.Get("Location")}
	}
	what, limit := answerCap(req)
	tooLarge := &answerTooLargeError{What: what, URL: req.URL.String(), Limit: limit}
	if resp.ContentLength > limit {
		resp.Body.Close()
		recordOversize(req.Context(), tooLarge)
		return nil, tooLarge
	}
	resp.Body = &cappedBody{body: resp.Body, left: limit, tooLarge: tooLarge, ctx: req.Context()}
	return resp, nil
}

// answerCap returns what req reads and the cap on its answer.
func answerCap(req *http.Request) (what string, limit int64) {
	if req.Method == http.MethodGet {
		return "description", maxDescriptionSize
	}
	// goupnp sets the header under its upper-case spelling, which
	// Header.Get (canonical keys) does not find.
	var h string
	for k, v := range req.Header {
		if strings.EqualFold(k, "SOAPAction") && len(v) > 0 {
			h = v[0]
		}
	}
	_, action, _ := strings.Cut(strings.Trim(h, `"`), "#")
	if action == "" {
		action = "SOAP"
	}
	if action == "GetListOfPortMappings" {
		return action, maxListAnswerSize
	}
	return action, maxSOAPAnswerSize
}

// cappedBody reads at most left more bytes of body, and fails once there
// are more.
type cappedBody struct {
	body     io.ReadCloser
	left     int64
	tooLarge *answerTooLargeError
	ctx      context.Context
	failed   bool
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.failed {
		return 0, b.tooLarge
	}
	// Read one byte past the cap, to tell an answer of exactly the cap from
	// a larger one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.body.Read(p)
	if int64(n) > b.left {
		b.failed = true
		recordOversize(b.ctx, b.tooLarge)
		return int(b.left), b.tooLarge
	}
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.body.Close() }

// oversizeKey is the context key of the record of an answer over its cap.
type oversizeKey struct{}

// withOversizeRecord returns a context under which capTransport records an
// answer over its cap, for oversize to report.
func withOversizeRecord(ctx context.Context) context.Context {
	return context.WithValue(ctx, oversizeKey{}, new(atomic.Pointer[answerTooLargeError]))
}

func recordOversize(ctx context.Context, e *answerTooLargeError) {
	if p, ok := ctx.Value(oversizeKey{}).(*atomic.Pointer[answerTooLargeError]); ok {
		p.Store(e)
	}
}

// oversize returns the answer over its cap recorded under ctx, or nil.
func oversize(ctx context.Context) *answerTooLargeError {
	if p, ok := ctx.Value(oversizeKey{}).(*atomic.Pointer[answerTooLargeError]); ok {
		return p.Load()
	}
	return nil
}

// cappedClient returns a copy of hc whose transport caps every answer and
// refuses every redirect, and which follows none; hc is not modified.
func cappedClient(hc *http.Client) *http.Client {
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	cp := *hc
	cp.Transport = capTransport{next: next}
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		// Unreachable while capTransport refuses redirects; kept so that
		// the client alone never follows one either.
		return &redirectError{URL: via[len(via)-1].URL.String(), Status: "a redirect", Location: req.URL.String()}
	}
	return &cp
}

// isRedirect reports whether code is a redirect the http package follows.
func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// redirectError reports an HTTP redirect from a router or LAN host, which
// the client never follows: the rule that a LOCATION and a control URL are
// on the answering host would mean nothing if its answers could send this
// host's requests anywhere (127.0.0.1, the API server, 169.254.169.254).
type redirectError struct {
	// URL is the request that was answered with the redirect.
	URL string
	// Status is the answer's status line.
	Status string
	// Location is where it pointed.
	Location string
}

// Error names the request, the status and where it pointed.
func (e *redirectError) Error() string {
	return fmt.Sprintf("igd: %s answered %s redirecting to %q: redirects are not followed", e.URL, e.Status, e.Location)
}
