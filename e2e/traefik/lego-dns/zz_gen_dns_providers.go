// Package dns: the DNS-01 providers left out of this local build (their
// modules are not all on the module proxy); ACME is not used in tests.
package dns

import (
	"fmt"

	"github.com/go-acme/lego/v5/challenge"
)

// NewDNSChallengeProviderByName refuses every provider.
func NewDNSChallengeProviderByName(name string) (challenge.Provider, error) {
	return nil, fmt.Errorf("DNS provider %q is not built into this traefik", name)
}
