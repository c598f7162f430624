// Package programmatic holds the programmatic runs under way on this replica (code
// that calls the client's tools while it runs) between the requests that drive them: a
// start, the continuations that bring each pause's tool results, and a cancel. Runs finds
// a run by its execution id and by the request ids (LibreChat's
// X-LibreChat-Code-Request-ID) that named it, and keeps for a while the request ids of
// runs that ended and of cancels that came before their run, so that a cancel gets its
// answer whichever comes first.
//
// The package knows nothing of HTTP: package api turns requests into these calls, and
// session runs the code. A run's result is released (its sandbox handed back) by whoever
// takes it, or here when nobody will.
package programmatic
