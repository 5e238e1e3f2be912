package edge

import (
	"bytes"
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// maxConfigSize bounds a cloud-config, as read and with YAML aliases
// expanded: decoding costs up to ~360 times the size (23 MiB for 64 KiB of
// one-character list items), and a node entry is about a hundred bytes.
const maxConfigSize = 64 << 10

// maxQuoted bounds what an error quotes of a value, a key or a YAML message.
const maxQuoted = 100

func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return strings.ToValidUTF8(s[:maxQuoted], "") + "..."
}

// decodeYAML reads one YAML (or JSON) document from r into cfg, pre-filled
// with defaults that absent or null keys keep. It parses it first into
// yaml.v3 nodes, which keep each alias as a pointer, to refuse aliases before
// anything expands them (go-yaml bounds only the share of nodes that come
// from aliases, which a 10 KB file of long strings passes while expanding to
// 10 MB), and a second document, which YAMLToJSONStrict would ignore (empty
// ones are allowed: a trailing "---" is harmless). sigs.k8s.io/yaml converts
// it to JSON, refusing duplicate keys, and decodeStrict decodes that. It
// returns the values that could not be decoded, or an error for a document
// that could not be read at all.
func decodeYAML(r io.Reader, cfg *Config) (field.ErrorList, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %w", ErrInvalidConfig, err)
	} else if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, maxConfigSize)
	}
	dec, size := yamlv3.NewDecoder(bytes.NewReader(data)), 0
	for n := 1; ; n++ {
		var doc yamlv3.Node
		if err = dec.Decode(&doc); err != nil {
			break
		} else if err := expand(&doc, &size, map[*yamlv3.Node]bool{}); err != nil || size > maxConfigSize {
			return nil, cmp.Or(err, fmt.Errorf("%w: YAML aliases expand the document past %d bytes", ErrInvalidConfig, maxConfigSize))
		} else if c := doc.Content; n > 1 && len(c) > 0 && c[0].ShortTag() != "!!null" {
			return nil, invalid(field.ErrorList{field.Forbidden(field.NewPath("(document)"), fmt.Sprintf("YAML document %d (after a \"---\" line) would be ignored: a cloud-config is one document", n))})
		}
	}
	var doc []byte
	if errors.Is(err, io.EOF) {
		doc, err = yaml.YAMLToJSONStrict(data)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: not valid YAML: %s", ErrInvalidConfig, clip(err.Error()))
	}
	return decodeStrict(nil, doc, reflect.ValueOf(cfg).Elem()), nil
}

// expand adds to size n's size with its aliases expanded (the bytes of each
// scalar, plus one per node), stopping past maxConfigSize; open holds the
// nodes being counted.
func expand(n *yamlv3.Node, size *int, open map[*yamlv3.Node]bool) error {
	if n.Kind == yamlv3.AliasNode {
		n = n.Alias
	}
	if open[n] {
		return fmt.Errorf("%w: YAML alias at line %d is inside its own anchor's value", ErrInvalidConfig, n.Line)
	}
	open[n], *size = true, *size+len(n.Value)+1
	defer delete(open, n)
	for _, c := range n.Content {
		if err := expand(c, size, open); err != nil || *size > maxConfigSize {
			return err
		}
	}
	return nil
}

var durationType, textType = reflect.TypeFor[metav1.Duration](), reflect.TypeFor[encoding.TextUnmarshaler]()

// decodeStrict decodes the JSON data into out with kjson.UnmarshalStrict
// (case-sensitive keys, unknown keys refused). When that fails it descends
// into data, decoding each key, list item or map entry on its own, so that
// every problem is reported with its full path: kjson reports only the first
// value of the wrong type, without map keys or list indexes.
func decodeStrict(path *field.Path, data []byte, out reflect.Value) (errs field.ErrorList) {
	strict, err := kjson.UnmarshalStrict(data, out.Addr().Interface())
	if err == nil && len(strict) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	var list []json.RawMessage
	switch t := out.Type(); {
	case t == durationType && string(data) == "0": // metav1.Duration reads only strings
		out.SetZero()
		fallthrough
	case t == durationType && string(data) == "null":
		return nil
	case t.Kind() == reflect.Struct && kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) == nil && obj != nil:
		fields := map[string]int{}
		for i := range t.NumField() {
			fields[t.Field(i).Tag.Get("json")] = i
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if i, known := fields[key]; known {
				errs = append(errs, decodeStrict(path.Child(key), obj[key], out.Field(i))...)
			} else {
				errs = append(errs, field.Forbidden(path.Child(clip(key)), "unknown field (known: "+strings.Join(slices.Sorted(maps.Keys(fields)), ", ")+")"))
			}
		}
		return errs
	case t.Kind() == reflect.Map && kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) == nil && obj != nil: // UnmarshalStrict made the map
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			elem := reflect.New(t.Elem()).Elem()
			errs = append(errs, decodeStrict(path.Key(clip(key)), obj[key], elem)...)
			out.SetMapIndex(reflect.ValueOf(key), elem)
		}
		return errs
	case t.Kind() == reflect.Slice && kjson.UnmarshalCaseSensitivePreserveInts(data, &list) == nil && list != nil:
		out.Set(reflect.MakeSlice(t, len(list), len(list)))
		for i, item := range list {
			errs = append(errs, decodeStrict(path.Index(i), item, out.Index(i))...)
		}
		return errs
	case reflect.PointerTo(t).Implements(textType) && data[0] == '"':
		var s string
		_ = json.Unmarshal(data, &s)
		return field.ErrorList{field.Invalid(path, clip(s), err.Error())} // it names the values accepted
	}
	var value any = json.RawMessage(data)
	if len(data) > maxQuoted {
		value = clip(string(data))
	}
	return field.ErrorList{field.TypeInvalid(cmp.Or(path, field.NewPath("(document)")), value, reason(out.Type(), data))}
}

// reason says what a value of type t should have been, given JSON data.
func reason(t reflect.Type, data []byte) string {
	got := cmp.Or(map[byte]string{'{': "a mapping", '[': "a list", '"': "a string", 't': "a boolean", 'f': "a boolean", 'n': "null"}[data[0]], "a number")
	switch {
	case t == durationType && got == "a number":
		return "a number has no unit: write a Go duration such as \"90s\" or \"1h\""
	case t == durationType && got == "a string":
		return "not a Go duration such as \"2s\" or \"1h\""
	case t == durationType:
		return "must be a Go duration string such as \"2s\", not " + got
	}
	want := map[reflect.Kind]string{reflect.Struct: "a mapping of fields", reflect.Map: "a mapping", reflect.Slice: "a list", reflect.String: "a string", reflect.Bool: "true or false"}[t.Kind()]
	if reflect.PointerTo(t).Implements(textType) {
		want = "a string"
	}
	return "must be " + cmp.Or(want, t.String()) + ", not " + got
}
