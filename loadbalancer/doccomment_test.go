package loadbalancer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryExportedNameHasADocComment holds the package to its style rule:
// every exported name (methods included) of its non-test files is documented.
func TestEveryExportedNameHasADocComment(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && d.Doc == nil {
					t.Errorf("%s: func %s has no doc comment", name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					var names []*ast.Ident
					var doc *ast.CommentGroup
					switch s := s.(type) {
					case *ast.TypeSpec:
						names, doc = []*ast.Ident{s.Name}, s.Doc
					case *ast.ValueSpec:
						names, doc = s.Names, s.Doc
					}
					for _, n := range names {
						if n.IsExported() && doc == nil && d.Doc == nil {
							t.Errorf("%s: %s has no doc comment", name, n.Name)
						}
					}
				}
			}
		}
	}
}
