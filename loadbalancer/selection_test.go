package loadbalancer

import (
	"strings"
	"testing"
)

func TestServiceSelectionText(t *testing.T) {
	for _, s := range []ServiceSelection{AnnotatedServices, AllServices} {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatalf("%v.MarshalText: %v", s, err)
		}
		var back ServiceSelection
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", text, back, err, s)
		}
	}
	for _, text := range []string{"", "All", "none", "1"} {
		var s ServiceSelection
		if err := s.UnmarshalText([]byte(text)); err == nil || !strings.Contains(err.Error(), `"all" or "annotated"`) {
			t.Errorf("UnmarshalText(%q) = %v, want an error naming the accepted values", text, err)
		}
	}
	if _, err := ServiceSelection(7).MarshalText(); err == nil {
		t.Error("ServiceSelection(7).MarshalText succeeded")
	}
}
