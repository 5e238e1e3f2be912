package igdtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// A lab test maps a port with the upnpc peer client, serves on the node and
// proves the data path from the internet side. Start skips the test without
// root or miniupnpd (and fails it when CI=true).
func ExampleStart() {
	testMapping := func(t *testing.T) {
		lab := igdtest.Start(t, igdtest.Options{})
		ctx := context.Background()

		ln, err := lab.Nodes[0].Listen("tcp", "192.0.2.10:30080") // the "nodePort"
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		// ... serve HTTP on ln ...

		if out, err := lab.Upnpc(ctx, 0, "-a", "192.0.2.10", "30080", "8080", "TCP"); err != nil {
			t.Fatalf("%v\n%s\nminiupnpd log:\n%s", err, out, lab.Log())
		}
		body, err := lab.InternetGet(ctx, "http://"+lab.ExternalIP.String()+":8080/")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(body)
	}
	_ = testMapping
}

// A client under test dials the router from inside a node's namespace by
// taking the node's dialer, HTTP client or packet listener.
func ExampleNode_HTTPClient() {
	testClient := func(t *testing.T) {
		lab := igdtest.Start(t, igdtest.Options{ForceIGDv1: true})
		resp, err := lab.Nodes[0].HTTPClient().Get(lab.RootDescURL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	_ = testClient
}
