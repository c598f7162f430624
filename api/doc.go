// Package api is kiln's HTTP surface: the chi router, the error envelope, request ids,
// authentication, body limits, request logging and the handlers of the routes in
// docs/api.md. It is the only package that imports chi. Handlers turn HTTP into calls
// of session.Service and of small interfaces (Health, Observer, Tokens, ...) that
// cmd/kiln wires to the real services.
package api
