package registry

import "fmt"

// ValidateName reports whether name can be used as a cloud provider name.
//
// A provider name becomes the scheme of every node's ProviderID
// ("NAME://instance-id"), so the rule is: not empty, starts with a lowercase
// ASCII letter, and contains only lowercase ASCII letters, digits and '-'.
// The returned error matches [ErrInvalidName] and names the offending name
// and character. This is the single place the rule is defined; package
// provider uses it too.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: name is empty", ErrInvalidName)
	}
	for i, c := range name {
		switch {
		case 'a' <= c && c <= 'z':
		case i > 0 && ('0' <= c && c <= '9' || c == '-'):
		case i == 0:
			return fmt.Errorf("%w %q: must start with a lowercase letter (a-z), not %q", ErrInvalidName, name, c)
		default:
			return fmt.Errorf("%w %q: character %q at byte %d is not a lowercase letter, digit or '-'", ErrInvalidName, name, c, i)
		}
	}
	return nil
}
