package pcpwire

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ccmkit/ccmkit/igd"
)

// TestErrorsMatchTheIgdConditions pins what a caller that knows only igd
// (the load balancer) recognises in this package's errors: every
// ResultError is igd.ErrRefused, CANNOT_PROVIDE_EXTERNAL is
// igd.ErrPortUnavailable and UNSUPP_OPTION igd.ErrThirdPartyRefused,
// whether the server answered them or the client made them; each still
// matches this package's sentinel and reads as before.
func TestErrorsMatchTheIgdConditions(t *testing.T) {
	conditions := []error{igd.ErrRefused, igd.ErrPortUnavailable, igd.ErrThirdPartyRefused, igd.ErrNotAuthorized, igd.ErrConflict}
	for _, tt := range []struct {
		name string
		err  error
		pcp  error   // this package's sentinel it matches (nil: none)
		want []error // the igd conditions it matches
	}{
		{"CANNOT_PROVIDE_EXTERNAL answered", &ResultError{Op: "map", Code: CannotProvideExternal}, ErrCannotProvideExternal, []error{igd.ErrRefused, igd.ErrPortUnavailable}},
		{"CANNOT_PROVIDE_EXTERNAL of the client (PREFER_FAILURE undone)", fmt.Errorf("pcp: map: %w: the server ignored PREFER_FAILURE", ErrCannotProvideExternal), ErrCannotProvideExternal, []error{igd.ErrPortUnavailable}},
		{"UNSUPP_OPTION answered", &ResultError{Op: "map", Code: UnsuppOption}, ErrUnsupportedOption, []error{igd.ErrRefused, igd.ErrThirdPartyRefused}},
		{"UNSUPP_OPTION wrapped", fmt.Errorf("pcp: map: %w", &ResultError{Op: "map", Code: UnsuppOption}), ErrUnsupportedOption, []error{igd.ErrRefused, igd.ErrThirdPartyRefused}},
		{"NOT_AUTHORIZED answered", &ResultError{Op: "delete", Code: NotAuthorized}, ErrNotAuthorized, []error{igd.ErrRefused}},
		{"NO_RESOURCES answered", &ResultError{Op: "map", Code: NoResources}, ErrNoResources, []error{igd.ErrRefused}},
		{"MALFORMED_REQUEST answered", &ResultError{Op: "map", Code: MalformedRequest}, nil, []error{igd.ErrRefused}},
		{"no answer", fmt.Errorf("pcp: map: %w", errors.New("timeout")), nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.pcp != nil && !errors.Is(tt.err, tt.pcp) {
				t.Errorf("errors.Is(%v, %v) = false", tt.err, tt.pcp)
			}
			var got []error
			for _, c := range conditions {
				if errors.Is(tt.err, c) {
					got = append(got, c)
				}
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("igd conditions matched (-want +got):\n%s", diff)
			}
		})
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{ErrCannotProvideExternal, "pcp: cannot provide the suggested external port (CANNOT_PROVIDE_EXTERNAL)"},
		{ErrUnsupportedOption, "pcp: unsupported option (UNSUPP_OPTION)"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("message = %q, want %q", got, tt.want)
		}
	}
}
