// Package ociimage writes a container image made of one file (a static
// binary) on an empty base as a tarball that `docker load`, `podman load`
// and containerd's `ctr images import` (`k3s ctr images import`) all read,
// with no Docker engine and no base image to pull: an OCI image layout
// (oci-layout, index.json, blobs) with a Docker-archive manifest.json
// beside it, sharing the blobs. The output depends only on the Config and
// the file's bytes.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Config describes the image.
type Config struct {
	// Binary is the file's content. Required.
	Binary []byte
	// Path is where the file is in the image and the entrypoint, such as
	// "/edge-ccm". Required, absolute.
	Path string
	// OS and Arch are the platform (GOOS, GOARCH); "" = "linux" and
	// "amd64".
	OS, Arch string
	// Ref names the image once loaded, such as "localhost/edge-ccm:dev".
	// Required, with a tag.
	Ref string
	// User runs the entrypoint; "" = "65532:65532" (non-root).
	User string
	// Created is the image's creation time; zero = the Unix epoch, so that
	// the same inputs give the same bytes.
	Created time.Time
}

// Media types of the OCI image specification.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is a descriptor's platform.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is an OCI image index (index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Image is an OCI image configuration, the fields this package sets.
type Image struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string   `json:"User,omitempty"`
		Entrypoint []string `json:"Entrypoint"`
		Env        []string `json:"Env,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// DockerManifest is one entry of a Docker archive's manifest.json.
type DockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

func (c *Config) validate() error {
	var errs []error
	if len(c.Binary) == 0 {
		errs = append(errs, errors.New("field Binary is empty"))
	}
	if !path.IsAbs(c.Path) || path.Clean(c.Path) != c.Path || c.Path == "/" {
		errs = append(errs, fmt.Errorf("field Path: %q is not a clean absolute file path", c.Path))
	}
	if i := strings.LastIndex(c.Ref, ":"); c.Ref == "" || i < strings.LastIndex(c.Ref, "/") || i < 0 {
		errs = append(errs, fmt.Errorf("field Ref: %q has no tag (name:tag)", c.Ref))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ociimage: Config: %w", err)
	}
	if c.OS == "" {
		c.OS = "linux"
	}
	if c.Arch == "" {
		c.Arch = "amd64"
	}
	if c.User == "" {
		c.User = "65532:65532"
	}
	if c.Created.IsZero() {
		c.Created = time.Unix(0, 0)
	}
	return nil
}

// blob is one content-addressed file of the tarball.
type blob struct {
	data []byte
	desc Descriptor
}

func newBlob(mediaType string, data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{data: data, desc: Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}}
}

func (b blob) name() string { return "blobs/sha256/" + strings.TrimPrefix(b.desc.Digest, "sha256:") }

// Write writes the image described by cfg to w as a tarball.
func Write(w io.Writer, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	layerData, err := layer(cfg)
	if err != nil {
		return err
	}
	lay := newBlob(MediaTypeLayer, layerData)

	var img Image
	img.Created = cfg.Created.UTC().Format(time.RFC3339)
	img.Architecture, img.OS = cfg.Arch, cfg.OS
	img.Config.User = cfg.User
	img.Config.Entrypoint = []string{cfg.Path}
	img.Config.Env = []string{"PATH=/"}
	img.RootFS.Type = "layers"
	img.RootFS.DiffIDs = []string{lay.desc.Digest} // uncompressed: the digest is the diff ID
	conf, err := jsonBlob(MediaTypeConfig, img)
	if err != nil {
		return err
	}
	man, err := jsonBlob(MediaTypeManifest, Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: conf.desc, Layers: []Descriptor{lay.desc}})
	if err != nil {
		return err
	}
	tag := cfg.Ref[strings.LastIndex(cfg.Ref, ":")+1:]
	mdesc := man.desc
	mdesc.Platform = &Platform{Architecture: cfg.Arch, OS: cfg.OS}
	mdesc.Annotations = map[string]string{
		"io.containerd.image.name":          cfg.Ref, // containerd's import names the image by it
		"org.opencontainers.image.ref.name": tag,
	}
	index, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{mdesc}})
	if err != nil {
		return err
	}
	docker, err := json.Marshal([]DockerManifest{{Config: conf.name(), RepoTags: []string{cfg.Ref}, Layers: []string{lay.name()}}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"manifest.json", docker},
		{lay.name(), lay.data},
		{conf.name(), conf.data},
		{man.name(), man.data},
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/", Mode: 0o755, ModTime: cfg.Created}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/sha256/", Mode: 0o755, ModTime: cfg.Created}); err != nil {
		return err
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: cfg.Created}); err != nil {
			return fmt.Errorf("ociimage: write %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("ociimage: write %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ociimage: finish the tarball: %w", err)
	}
	return nil
}

// layer returns the image's one layer: the binary at cfg.Path (owned by
// root, executable by all) and an empty /tmp.
func layer(cfg Config) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rel := strings.TrimPrefix(cfg.Path, "/")
	hdrs := []*tar.Header{{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: cfg.Created}}
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		hdrs = append([]*tar.Header{{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: cfg.Created}}, hdrs...)
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o755, Size: int64(len(cfg.Binary)), ModTime: cfg.Created}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(cfg.Binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func jsonBlob(mediaType string, v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, fmt.Errorf("ociimage: encode %s: %w", mediaType, err)
	}
	return newBlob(mediaType, data), nil
}
