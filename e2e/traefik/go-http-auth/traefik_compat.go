package auth

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// CheckSecret reports whether password matches secret (an htpasswd entry:
// bcrypt, $apr1$, {SHA} or crypt), as the containous fork that traefik
// requires exports it; the fork is not on the module proxy.
func CheckSecret(password, secret string) bool {
	compare := compareFuncs[0].compare
	for _, cmp := range compareFuncs[1:] {
		if strings.HasPrefix(secret, cmp.prefix) {
			compare = cmp.compare
			break
		}
	}
	return compare([]byte(secret), []byte(password)) == nil
}

// RequireAuthStale is RequireAuth telling the client its nonce was stale.
func (a *DigestAuth) RequireAuthStale(w http.ResponseWriter, r *http.Request) {
	if len(a.clients) > a.ClientCacheSize+a.ClientCacheTolerance {
		a.Purge(a.ClientCacheTolerance * 2)
	}
	nonce := RandomKey()
	a.clients[nonce] = &digest_client{nc: 0, last_seen: time.Now().UnixNano()}
	w.Header().Set(contentType, a.Headers.V().UnauthContentType)
	w.Header().Set(a.Headers.V().Authenticate,
		fmt.Sprintf(`Digest realm="%s", nonce="%s", opaque="%s", algorithm="MD5", qop="auth", stale="true"`,
			a.Realm, nonce, a.Opaque))
	w.WriteHeader(a.Headers.V().UnauthCode)
	w.Write([]byte(a.Headers.V().UnauthResponse))
}
