package edge

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ccmkit/ccmkit/provider"
)

// TestFactoryAdoptsK3sNodes builds the provider as edge-ccm does, from an
// empty cloud-config: nodes k3s or RKE2 initialized exist and keep their
// ProviderID; other foreign ProviderIDs stay errors, never "gone".
func TestFactoryAdoptsK3sNodes(t *testing.T) {
	cloud, err := Factory(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	instances, ok := cloud.InstancesV2()
	if !ok {
		t.Fatal("no InstancesV2")
	}
	tests := []struct {
		providerID string
		wantErr    error
	}{
		{providerID: "k3s://pi"},
		{providerID: "rke2://pi"},
		{providerID: "edge://pi"},
		{providerID: "k3s://other", wantErr: provider.ErrForeignProviderID},
		{providerID: "aws:///eu-west-1a/i-0123", wantErr: provider.ErrForeignProviderID},
	}
	for _, tt := range tests {
		t.Run(tt.providerID, func(t *testing.T) {
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pi"}, Spec: v1.NodeSpec{ProviderID: tt.providerID}}
			exists, err := instances.InstanceExists(context.Background(), node)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("InstanceExists error = %v, want %v", err, tt.wantErr)
			}
			if exists != (tt.wantErr == nil) {
				t.Errorf("InstanceExists = %v", exists)
			}
			if tt.wantErr != nil {
				return
			}
			md, err := instances.InstanceMetadata(context.Background(), node)
			if err != nil {
				t.Fatal(err)
			}
			if md.ProviderID != tt.providerID {
				t.Errorf("InstanceMetadata ProviderID = %q, want the node's own %q", md.ProviderID, tt.providerID)
			}
		})
	}
}
