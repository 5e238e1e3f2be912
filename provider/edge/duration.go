package edge

import (
	"encoding/json"
	"errors"
	"time"
)

// Duration is a time.Duration written in the cloud-config as a Go duration
// string ("90s", "1h30m"). The bare number 0 is accepted as a zero duration;
// any other bare number is an error, because it has no unit.
//
// It is not metav1.Duration because that refuses the bare 0 ("lease: 0",
// the documented way to ask for the default lease), and its errors
// ("time: missing unit in duration") do not say what to write instead.
type Duration struct {
	time.Duration
}

// errDurationNoUnit is the reason given for a bare non-zero number.
var errDurationNoUnit = errors.New("a number has no unit: write a Go duration such as \"90s\" or \"1h\"")

// UnmarshalJSON reads a Go duration string, or the number 0; null leaves d
// unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case string:
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("not a Go duration such as \"2s\" or \"1h\"")
		}
		d.Duration = parsed
		return nil
	case float64:
		if v == 0 {
			d.Duration = 0
			return nil
		}
		return errDurationNoUnit
	case bool:
		return errors.New("must be a Go duration string such as \"2s\", not a boolean")
	case []any:
		return errors.New("must be a Go duration string such as \"2s\", not a list")
	default:
		return errors.New("must be a Go duration string such as \"2s\", not a mapping")
	}
}

// MarshalJSON writes d as a Go duration string, so that a Config marshalled
// with sigs.k8s.io/yaml reads back unchanged.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}
