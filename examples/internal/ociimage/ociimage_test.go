package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readTar returns the regular files of a tarball by name, and the mode of
// each.
func readTar(t *testing.T, data []byte) (map[string][]byte, map[string]int64) {
	t.Helper()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		require.NoError(t, err)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[h.Name], modes[h.Name] = b, h.Mode
	}
}

// blobOf reads the blob a descriptor names and checks its digest and size.
func blobOf(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	require.True(t, ok, "blob %s missing", d.Digest)
	sum := sha256.Sum256(b)
	require.Equal(t, d.Digest, "sha256:"+hex.EncodeToString(sum[:]), "digest of %s", d.MediaType)
	require.Equal(t, d.Size, int64(len(b)), "size of %s", d.MediaType)
	return b
}

// TestWrite reads an image back the way an OCI importer (containerd) and a
// Docker-archive loader do, and finds the binary as the entrypoint.
func TestWrite(t *testing.T) {
	bin := []byte("\x7fELF not really")
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, Config{Binary: bin, Path: "/edge-ccm", Arch: "arm64", Ref: "localhost/edge-ccm:dev"}))
	files, modes := readTar(t, buf.Bytes())

	assert.JSONEq(t, `{"imageLayoutVersion":"1.0.0"}`, string(files["oci-layout"]))
	var index Index
	require.NoError(t, json.Unmarshal(files["index.json"], &index))
	require.Len(t, index.Manifests, 1)
	md := index.Manifests[0]
	assert.Equal(t, "localhost/edge-ccm:dev", md.Annotations["io.containerd.image.name"])
	assert.Equal(t, &Platform{Architecture: "arm64", OS: "linux"}, md.Platform)
	var man Manifest
	require.NoError(t, json.Unmarshal(blobOf(t, files, md), &man))
	require.Len(t, man.Layers, 1)
	var img Image
	require.NoError(t, json.Unmarshal(blobOf(t, files, man.Config), &img))
	assert.Equal(t, []string{"/edge-ccm"}, img.Config.Entrypoint)
	assert.Equal(t, "65532:65532", img.Config.User)
	assert.Equal(t, []string{man.Layers[0].Digest}, img.RootFS.DiffIDs)
	layer, layerModes := readTar(t, blobOf(t, files, man.Layers[0]))
	assert.Equal(t, bin, layer["edge-ccm"])
	assert.Equal(t, int64(0o755), layerModes["edge-ccm"])

	var docker []DockerManifest
	require.NoError(t, json.Unmarshal(files["manifest.json"], &docker))
	require.Len(t, docker, 1)
	assert.Equal(t, []string{"localhost/edge-ccm:dev"}, docker[0].RepoTags)
	assert.Contains(t, files, docker[0].Config)
	assert.Equal(t, files[docker[0].Layers[0]], blobOf(t, files, man.Layers[0]))
	assert.Equal(t, int64(0o644), modes["index.json"])

	var again bytes.Buffer
	require.NoError(t, Write(&again, Config{Binary: bin, Path: "/edge-ccm", Arch: "arm64", Ref: "localhost/edge-ccm:dev"}))
	assert.Equal(t, buf.Bytes(), again.Bytes(), "the same inputs must give the same tarball")
}

func TestWriteValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no binary", Config{Path: "/x", Ref: "x:1"}, "field Binary"},
		{"relative path", Config{Binary: []byte{1}, Path: "x", Ref: "x:1"}, "field Path"},
		{"no tag", Config{Binary: []byte{1}, Path: "/x", Ref: "localhost:5000/x"}, "field Ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(io.Discard, tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
