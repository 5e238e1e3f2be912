package pcp

import (
	"context"
	"errors"

	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// PinholesConfig configures Pinholes.
type PinholesConfig struct {
	PCP    *Client
	Secret []byte
}

// Pinholes opens IPv6 pinholes through PCP.
type Pinholes struct{}

// NewPinholes returns Pinholes for cfg.
func NewPinholes(cfg PinholesConfig) (*Pinholes, error) { return &Pinholes{}, nil }

// OpenPinhole opens or renews p.
func (p *Pinholes) OpenPinhole(ctx context.Context, ph pinhole.Pinhole) error {
	return errors.New("not implemented")
}

// ClosePinhole closes p.
func (p *Pinholes) ClosePinhole(ctx context.Context, ph pinhole.Pinhole) error {
	return errors.New("not implemented")
}
