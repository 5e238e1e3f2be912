package upnp

import (
	"bytes"
	"strings"
	"testing"
)

func TestCharsetReaderLatin1(t *testing.T) {
	r, err := charsetReader("ISO-8859-1", strings.NewReader("Fritz\xe4Box"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(r)
	if b.String() != "FritzäBox" {
		t.Errorf("charsetReader() = %q", b.String())
	}
	if _, err := charsetReader("EBCDIC", strings.NewReader("")); err == nil {
		t.Error("charsetReader(EBCDIC) succeeded")
	}
}
