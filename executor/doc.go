// Package executor runs one execution: it validates and bounds the request, checks a
// sandbox out of the pool, sends the request frame, reads the response frame under a
// hard deadline, maps what happened to the sandbox to a status, and gives the sandbox
// back for removal. What the user's code did is data in the Result; an error means
// kiln itself could not do the job.
package executor
