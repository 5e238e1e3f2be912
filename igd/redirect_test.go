package igd

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// A router's HTTP answers must not send this host elsewhere: a 302 to the
// description fetch would send GETs, a 307 to a SOAP call would re-send
// the POST, to any address the node reaches (127.0.0.1, the API server,
// 169.254.169.254). No redirect is followed, through the default HTTP
// client or one the caller gives, and the error names where it pointed.
func TestNoRedirectIsFollowed(t *testing.T) {
	var reached atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
	}))
	t.Cleanup(target.Close)
	elsewhere := target.URL + "/latest/meta-data/"

	desc, err := os.ReadFile(filepath.Join("testdata", igd2Device.file))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"302 to the description fetch", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere, http.StatusFound)
		}},
		{"303 to a SOAP call", func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/rootDesc.xml" {
				w.Write(desc)
				return
			}
			http.Redirect(w, r, elsewhere, http.StatusSeeOther)
		}},
		{"307 to a SOAP call", func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				w.Write(desc)
				return
			}
			http.Redirect(w, r, elsewhere, http.StatusTemporaryRedirect)
		}},
	}
	for _, tt := range tests {
		for _, client := range []struct {
			name string
			hc   *http.Client
		}{{"default client", nil}, {"caller's client", &http.Client{}}} {
			t.Run(tt.name+", "+client.name, func(t *testing.T) {
				reached.Store(0)
				router := httptest.NewServer(tt.handler)
				t.Cleanup(router.Close)
				c, err := NewClient(Config{RootDescURL: router.URL + "/rootDesc.xml", HTTPClient: client.hc, Host: fakeHost{}})
				if err != nil {
					t.Fatal(err)
				}
				gw, err := c.Discover(testCtx(t))
				if err == nil {
					t.Fatalf("Discover() chose %s through a redirect", gw.Location)
				}
				if !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), elsewhere) {
					t.Errorf("Discover() = %v, want an error saying it refused the redirect to %s", err, elsewhere)
				}
				if n := reached.Load(); n != 0 {
					t.Errorf("the redirect's target was reached %d times, want never", n)
				}
			})
		}
	}
}
