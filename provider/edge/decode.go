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

func notYAML(err error) error {
	return fmt.Errorf("%w: not valid YAML: %s", ErrInvalidConfig, clip(err.Error()))
}

// documentPath names the document itself in errors that are about no key.
var documentPath = field.NewPath("(document)")

// decodeYAML reads one YAML (or JSON) document from r into cfg, pre-filled
// with defaults that absent or null keys keep: sigs.k8s.io/yaml converts it
// to JSON, refusing duplicate keys, and decodeStrict decodes that. It returns
// the values that could not be decoded, or an error for a document that
// could not be read at all.
func decodeYAML(r io.Reader, cfg *Config) (field.ErrorList, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %w", ErrInvalidConfig, err)
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, maxConfigSize)
	}
	if err := scanDocuments(data); err != nil {
		return nil, err
	}
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, notYAML(err)
	}
	return decodeStrict(nil, doc, reflect.ValueOf(cfg).Elem()), nil
}

// scanDocuments parses data into yaml.v3 nodes, which keep each alias as a
// pointer, so as to refuse aliases before anything expands them: go-yaml
// bounds only the share of nodes that come from aliases (Kubernetes' answer
// to CVE-2019-11253), which a 10 KB file of long strings passes while
// expanding to 10 MB. It also refuses a second document, which
// YAMLToJSONStrict would ignore; empty (null) ones after the first are
// allowed, so that a trailing "---" is harmless.
func scanDocuments(data []byte) error {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	sizes, total := make(map[*yamlv3.Node]int), 0
	for n := 1; ; n++ {
		var doc yamlv3.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return notYAML(err)
		}
		size, err := expandedSize(&doc, sizes)
		if total += size; err != nil || total > maxConfigSize {
			return cmp.Or(err, fmt.Errorf("%w: YAML aliases expand the document past %d bytes", ErrInvalidConfig, maxConfigSize))
		}
		if c := doc.Content; n > 1 && len(c) > 0 && c[0].ShortTag() != "!!null" {
			return invalid(field.ErrorList{field.Forbidden(documentPath, fmt.Sprintf("YAML document %d (after a \"---\" line) would be ignored: a cloud-config is one document", n))})
		}
	}
}

// expandedSize is n's size with its aliases expanded (the bytes of each
// scalar, plus one per node), capped just past maxConfigSize; sizes holds
// the nodes already counted, -1 for those being counted.
func expandedSize(n *yamlv3.Node, sizes map[*yamlv3.Node]int) (int, error) {
	if size, seen := sizes[n]; seen && size < 0 {
		return 0, fmt.Errorf("%w: YAML alias at line %d is inside its own anchor's value", ErrInvalidConfig, n.Line)
	} else if seen {
		return size, nil
	}
	sizes[n] = -1
	size, children := len(n.Value)+1, n.Content
	if n.Kind == yamlv3.AliasNode {
		size, children = 0, []*yamlv3.Node{n.Alias}
	}
	for _, c := range children {
		s, err := expandedSize(c, sizes)
		if err != nil {
			return 0, err
		}
		size = min(size+s, maxConfigSize+1)
	}
	sizes[n] = size
	return size, nil
}

var durationType, textType = reflect.TypeFor[metav1.Duration](), reflect.TypeFor[encoding.TextUnmarshaler]()

// decodeStrict decodes the JSON data into out with kjson.UnmarshalStrict
// (case-sensitive keys, unknown keys refused). When that fails it descends
// into data, decoding each key, list item or map entry on its own, so that
// every problem is reported with its full path: kjson reports only the first
// value of the wrong type, without map keys or list indexes.
func decodeStrict(path *field.Path, data []byte, out reflect.Value) field.ErrorList {
	strict, err := kjson.UnmarshalStrict(data, out.Addr().Interface())
	if err == nil && len(strict) == 0 {
		return nil
	}
	var errs field.ErrorList
	var obj map[string]json.RawMessage
	var list []json.RawMessage
	switch t := out.Type(); {
	case t == durationType && (string(data) == "null" || string(data) == "0"):
		if string(data) == "0" { // metav1.Duration reads only strings
			out.SetZero()
		}
		return nil
	case t.Kind() == reflect.Struct && kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) == nil && obj != nil:
		fields := make(map[string]int, t.NumField())
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
	case t.Kind() == reflect.Map && kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) == nil && obj != nil:
		if out.IsNil() {
			out.Set(reflect.MakeMap(t))
		}
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
	case reflect.PointerTo(out.Type()).Implements(textType) && data[0] == '"':
		var s string
		_ = json.Unmarshal(data, &s)
		return field.ErrorList{field.Invalid(path, clip(s), err.Error())} // it names the values accepted
	}
	var value any = json.RawMessage(data)
	if len(data) > maxQuoted {
		value = clip(string(data))
	}
	return field.ErrorList{field.TypeInvalid(cmp.Or(path, documentPath), value, reason(out.Type(), data))}
}

// reason says what a value of type t should have been, given JSON data.
func reason(t reflect.Type, data []byte) string {
	got := map[byte]string{'{': "a mapping", '[': "a list", '"': "a string", 't': "a boolean", 'f': "a boolean", 'n': "null"}[data[0]]
	got = cmp.Or(got, "a number")
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
