package routercheck_test

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/routercheck"
)

// review5: isProbe takes any non-empty description that is a prefix of the
// probe's tag ("ccmkit-check <hex>") for the probe. Since bab7b37 an add
// the router refused is read back and removed when isProbe says so. Here
// another program on this host takes the probe's key between the check's
// read and its add (the residual window) with a mapping to the same host
// and internal port, described "ccmkit"; the router refuses the probe's add
// (718 ConflictInMappingEntry: the router did not store the probe). The
// check then deletes the other program's mapping: a destructive write with
// no proof of ownership (the router said the probe was not stored), only a
// 6-character description that happens to be a prefix of the tag.
func TestReview5RefusedAddDeletesAnotherMappingWithAPrefixDescription(t *testing.T) {
	var once sync.Once
	var theirs igd.Mapping
	var r *fake.Router
	r, c := newCheck(t, fake.RouterConfig{}, fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		refuse := false
		once.Do(func() {
			if !strings.HasPrefix(m.Description, "ccmkit-check") {
				return
			}
			theirs = m
			theirs.Description = "ccmkit"
			theirs.Lease = 0
			r.Put(theirs)
			refuse = true
		})
		if refuse {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: igd.CodeConflict, Description: "ConflictInMappingEntry"}
		}
		return next(ctx, m)
	}})
	if _, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost}); err != nil {
		t.Logf("Run: %v", err)
	}
	if !theirs.InternalClient.IsValid() {
		t.Fatal("no probe add was seen")
	}
	for _, m := range r.Mappings() {
		if m.Key() == theirs.Key() && m.Description == "ccmkit" {
			return
		}
	}
	t.Errorf("the check deleted %s -> %s:%d (%q), a mapping it did not add (its add was refused with 718); router now holds %v",
		theirs.Key(), theirs.InternalClient, theirs.InternalPort, theirs.Description, r.Mappings())
}
