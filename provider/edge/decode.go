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
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// maxConfigSize bounds how much of a cloud-config is read: the schema is a
// few hundred bytes, so anything near this is not a cloud-config.
const maxConfigSize = 1 << 20

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
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: not valid YAML: %w", ErrInvalidConfig, err)
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
			return nil, fmt.Errorf("%w: not valid YAML: %w", ErrInvalidConfig, err)
		case n > 1 && doc != nil:
			return field.ErrorList{field.Forbidden(documentPath, fmt.Sprintf("YAML document %d (after a \"---\" line) would be ignored: a cloud-config is one document", n))}, nil
		}
	}
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
				errs = append(errs, field.Forbidden(path.Child(key),
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
			errs = append(errs, decodeStrict(path.Key(key), obj[key], elem)...)
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
	return field.ErrorList{field.TypeInvalid(path, json.RawMessage(data), reason(err))}
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
