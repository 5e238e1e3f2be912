package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	goyaml "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// maxConfigSize bounds how much of a cloud-config is read: the schema is a
// few hundred bytes, so anything near this is not a cloud-config.
const maxConfigSize = 1 << 20

// decodeYAML reads a YAML (or JSON) document from r into out, which must be
// a pointer to a struct pre-filled with defaults. Keys that are absent or
// null keep their defaults. Unknown keys, duplicate keys and values of the
// wrong type are errors naming the field by its path in the document.
//
// The document is converted to JSON with sigs.k8s.io/yaml (strict: a
// duplicate key is an error) and then walked against out's type, field by
// field, so that every error carries the path of the field it is about;
// encoding/json's own errors do not name unknown fields' parents.
func decodeYAML(r io.Reader, out any) error {
	data, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
	if err != nil {
		return fmt.Errorf("%w: read: %w", ErrInvalidConfig, err)
	}
	if len(data) > maxConfigSize {
		return fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, maxConfigSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("%w: not valid YAML: %w", ErrInvalidConfig, err)
	}
	if err := oneDocument(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return decodeValue("", doc, reflect.ValueOf(out).Elem())
}

// oneDocument returns an error when data holds more than one YAML document:
// YAMLToJSONStrict reads the first and would silently ignore the others.
// Empty (null) documents after the first are allowed, so that a trailing
// "---" is harmless; an empty first document followed by another is not,
// since the first is the one read. It parses with the library
// sigs.k8s.io/yaml itself uses, so both agree on where documents start.
func oneDocument(data []byte) error {
	dec := goyaml.NewDecoder(bytes.NewReader(data))
	for n := 1; ; n++ {
		var doc any
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("%w: not valid YAML: %w", ErrInvalidConfig, err)
		case n > 1 && doc != nil:
			return &FieldError{Reason: fmt.Sprintf("YAML document %d (after a \"---\" line) would be ignored: a cloud-config is one document", n)}
		}
	}
}

var jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// decodeValue stores in (a value produced by encoding/json with UseNumber)
// into out, reporting problems as *FieldError values for path.
func decodeValue(path string, in any, out reflect.Value) error {
	if in == nil {
		return nil // null or empty: keep the default
	}
	if out.CanAddr() && out.Addr().Type().Implements(jsonUnmarshalerType) {
		raw, err := json.Marshal(in)
		if err != nil {
			return &FieldError{Field: path, Value: fmt.Sprint(in), Reason: err.Error()}
		}
		if err := out.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			return &FieldError{Field: path, Value: string(raw), Reason: err.Error()}
		}
		return nil
	}
	switch out.Kind() {
	case reflect.Struct:
		obj, ok := in.(map[string]any)
		if !ok {
			return typeError(path, in, "a mapping of fields")
		}
		fields := jsonFields(out.Type())
		var errs []error
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			idx, known := fields[key]
			if !known {
				errs = append(errs, &FieldError{
					Field:  joinPath(path, key),
					Reason: "unknown field (known: " + strings.Join(slices.Sorted(maps.Keys(fields)), ", ") + ")",
				})
				continue
			}
			if err := decodeValue(joinPath(path, key), obj[key], out.Field(idx)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	case reflect.Map:
		obj, ok := in.(map[string]any)
		if !ok {
			return typeError(path, in, "a mapping")
		}
		if len(obj) == 0 {
			return nil // an empty mapping adds nothing to the default
		}
		if out.IsNil() {
			out.Set(reflect.MakeMapWithSize(out.Type(), len(obj)))
		}
		var errs []error
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			elem := reflect.New(out.Type().Elem()).Elem()
			if err := decodeValue(fmt.Sprintf("%s[%q]", path, key), obj[key], elem); err != nil {
				errs = append(errs, err)
				continue
			}
			out.SetMapIndex(reflect.ValueOf(key).Convert(out.Type().Key()), elem)
		}
		return errors.Join(errs...)
	case reflect.Slice:
		list, ok := in.([]any)
		if !ok {
			return typeError(path, in, "a list")
		}
		s := reflect.MakeSlice(out.Type(), len(list), len(list))
		var errs []error
		for i, item := range list {
			if err := decodeValue(fmt.Sprintf("%s[%d]", path, i), item, s.Index(i)); err != nil {
				errs = append(errs, err)
			}
		}
		out.Set(s)
		return errors.Join(errs...)
	case reflect.String:
		s, ok := in.(string)
		if !ok {
			if _, scalar := in.(json.Number); scalar || in == true || in == false {
				return typeError(path, in, "a string (write it in quotes)")
			}
			return typeError(path, in, "a string")
		}
		out.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := in.(bool)
		if !ok {
			return typeError(path, in, "true or false")
		}
		out.SetBool(b)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := in.(json.Number)
		if !ok {
			return typeError(path, in, "a whole number")
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || out.OverflowInt(i) {
			return &FieldError{Field: path, Value: n.String(), Reason: "must be a whole number in range"}
		}
		out.SetInt(i)
		return nil
	}
	// Only reachable by adding a field of an unsupported kind to Config.
	return &FieldError{Field: path, Reason: "internal error: unsupported field kind " + out.Kind().String()}
}

// jsonFields maps the JSON names of t's exported fields to their indexes.
func jsonFields(t reflect.Type) map[string]int {
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = i
	}
	return fields
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func typeError(path string, in any, want string) error {
	raw, _ := json.Marshal(in)
	return &FieldError{Field: path, Value: string(raw), Reason: "must be " + want + ", not " + jsonKind(in)}
}

// jsonKind names the kind of a value decoded by encoding/json.
func jsonKind(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case float64:
		if v == math.Trunc(v) {
			return "a whole number"
		}
		return "a number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
