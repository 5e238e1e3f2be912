package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	goyaml "go.yaml.in/yaml/v2"
	yamlv3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// maxConfigSize bounds how much of a cloud-config is read, and the size of
// its documents with YAML aliases expanded (see boundAliases). The schema is
// a few hundred bytes, and a node entry about a hundred. Decoding costs
// several hundred times the size of a dense document (about 23 MiB for
// 64 KiB of one-character list items), so a larger limit would let a small
// file take a lot of memory.
const maxConfigSize = 64 << 10

// maxQuoted bounds what an error quotes of a value, a key or a YAML parser
// message, so that a long value cannot make a long error.
const maxQuoted = 100

// clip returns s, or its first maxQuoted bytes and "...".
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return strings.ToValidUTF8(s[:maxQuoted], "") + "..."
}

// notYAML is the error for a document the YAML parsers refuse.
func notYAML(err error) error {
	return fmt.Errorf("%w: not valid YAML: %s", ErrInvalidConfig, clip(err.Error()))
}

// documentPath names the document itself in errors that are about no key.
var documentPath = field.NewPath("(document)")

// decodeYAML reads one YAML (or JSON) document from r into cfg, which is
// pre-filled with defaults; keys that are absent or null keep them.
//
// sigs.k8s.io/yaml converts the document to JSON, refusing duplicate keys,
// and sigs.k8s.io/json decodes it strictly (case-sensitive keys, unknown
// keys refused). Errors other than reading and YAML syntax are a
// field.ErrorList naming each key by its path.
func decodeYAML(r io.Reader, cfg *Config) (field.ErrorList, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %w", ErrInvalidConfig, err)
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, maxConfigSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	if err := boundAliases(data); err != nil {
		return nil, err
	}
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, notYAML(err)
	}
	if errs, err := oneDocument(data); len(errs) > 0 || err != nil {
		return errs, err
	}
	return decodeStrict(nil, doc, reflect.ValueOf(cfg).Elem()), nil
}

// oneDocument reports a second YAML document: YAMLToJSONStrict reads the
// first and would silently ignore the others. Empty (null) documents after
// the first are allowed, so that a trailing "---" is harmless; an empty
// first document followed by another is not, since the first is the one
// read. It parses with the library sigs.k8s.io/yaml itself uses, so both
// agree on where documents start.
func oneDocument(data []byte) (field.ErrorList, error) {
	dec := goyaml.NewDecoder(bytes.NewReader(data))
	for n := 1; ; n++ {
		var doc any
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil, nil
		case err != nil:
			return nil, notYAML(err)
		case n > 1 && doc != nil:
			return field.ErrorList{field.Forbidden(documentPath, fmt.Sprintf("YAML document %d (after a \"---\" line) would be ignored: a cloud-config is one document", n))}, nil
		}
	}
}

// boundAliases refuses YAML aliases that would expand data past
// maxConfigSize, before anything expands them. go-yaml bounds only the
// share of nodes that come from aliases (the bound Kubernetes relies on
// since CVE-2019-11253), which a 10 KB file of long strings passes while
// expanding to 10 MB. yaml.v3 parses into nodes that keep each alias as a
// pointer to its anchor's node, so the expanded size (the bytes of every
// scalar, plus one per node) is summed once per node, whatever the aliases.
func boundAliases(data []byte) error {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	sizes := make(map[*yamlv3.Node]int)
	total := 0
	for {
		var doc yamlv3.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return notYAML(err)
		}
		size, err := expandedSize(&doc, sizes)
		if err != nil {
			return err
		}
		if total += size; total > maxConfigSize {
			return fmt.Errorf("%w: YAML aliases expand the document past %d bytes", ErrInvalidConfig, maxConfigSize)
		}
	}
}

// expandedSize is n's size with aliases expanded, capped just past
// maxConfigSize; sizes holds the nodes already counted (-1: being counted).
func expandedSize(n *yamlv3.Node, sizes map[*yamlv3.Node]int) (int, error) {
	switch size, seen := sizes[n]; {
	case seen && size < 0:
		return 0, fmt.Errorf("%w: YAML alias at line %d is inside its own anchor's value", ErrInvalidConfig, n.Line)
	case seen:
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

// decodeStrict decodes the JSON data into out with kjson.UnmarshalStrict.
// When that finds a problem it descends into data, decoding each key,
// element or entry on its own, so that every problem is reported, each with
// its full path: kjson reports only the first value of the wrong type,
// without its map keys and list indexes, and then drops the unknown-key
// errors. Only the error path descends; a valid document is decoded by kjson
// alone.
func decodeStrict(path *field.Path, data []byte, out reflect.Value) field.ErrorList {
	strict, err := kjson.UnmarshalStrict(data, out.Addr().Interface())
	if err == nil && len(strict) == 0 {
		return nil
	}
	var errs field.ErrorList
	kind := out.Kind()
	if _, leaf := out.Addr().Interface().(json.Unmarshaler); leaf {
		kind = reflect.Invalid // a Duration: its own error says what is wrong
	}
	switch kind {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) != nil || obj == nil {
			break
		}
		fields := jsonFields(out.Type())
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			i, known := fields[key]
			if !known {
				errs = append(errs, field.Forbidden(path.Child(clip(key)),
					"unknown field (known: "+strings.Join(slices.Sorted(maps.Keys(fields)), ", ")+")"))
				continue
			}
			errs = append(errs, decodeStrict(path.Child(key), obj[key], out.Field(i))...)
		}
		if len(errs) > 0 {
			return errs
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) != nil || obj == nil {
			break
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			elem := reflect.New(out.Type().Elem()).Elem()
			errs = append(errs, decodeStrict(path.Key(clip(key)), obj[key], elem)...)
		}
		if len(errs) > 0 {
			return errs
		}
	case reflect.Slice:
		var list []json.RawMessage
		if kjson.UnmarshalCaseSensitivePreserveInts(data, &list) != nil || list == nil {
			break
		}
		for i, item := range list {
			elem := reflect.New(out.Type().Elem()).Elem()
			errs = append(errs, decodeStrict(path.Index(i), item, elem)...)
		}
		if len(errs) > 0 {
			return errs
		}
	}
	// A value of the wrong type, or (should the parts all decode) whatever
	// kjson found in the whole.
	if err == nil {
		err = strict[0]
	}
	if path == nil {
		path = documentPath
	}
	var value any = json.RawMessage(data)
	if len(data) > maxQuoted {
		value = clip(string(data))
	}
	return field.ErrorList{field.TypeInvalid(path, value, reason(err))}
}

// jsonFields maps the JSON names of t's exported fields to their indexes
// (every field of Config has a json tag).
func jsonFields(t reflect.Type) map[string]int {
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = i
		}
	}
	return fields
}

// reason says what a value of the wrong type should have been.
func reason(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err.Error() // from Duration.UnmarshalJSON
	}
	want := map[reflect.Kind]string{
		reflect.Struct: "a mapping of fields",
		reflect.Map:    "a mapping",
		reflect.Slice:  "a list",
		reflect.String: "a string",
		reflect.Bool:   "true or false",
	}[te.Type.Kind()]
	if want == "" {
		want = te.Type.String()
	}
	got, _, _ := strings.Cut(te.Value, " ") // "number 5" is a number
	return "must be " + want + ", not " + jsonKindName(got)
}

// jsonKindName names a JSON kind as encoding/json spells it ("array").
func jsonKindName(kind string) string {
	switch kind {
	case "object":
		return "a mapping"
	case "array":
		return "a list"
	case "bool":
		return "a boolean"
	case "string", "number":
		return "a " + kind
	}
	return kind
}
