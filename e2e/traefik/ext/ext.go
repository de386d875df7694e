// Package ext stands in for traefik's nested module of the same path, which
// the module zip of github.com/traefik/traefik/v3 does not carry: the
// extension points of the dynamic configuration, empty in the open-source build.
package ext

// HTTP is inlined into dynamic.HTTPConfiguration.
type HTTP struct{}

// Router is inlined into dynamic.Router.
type Router struct{}
