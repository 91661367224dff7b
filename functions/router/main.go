// Command router is the sfnlimit router Lambda function; internal/app wires it.
package main

import (
	"github.com/sfnlimit/sfnlimit/internal/app"
	"github.com/sfnlimit/sfnlimit/internal/router"
)

func main() {
	app.StartLambda("router", app.Router, func(h *router.Router) any { return h.Handle })
}
