// Command router is the sfnlimit router Lambda function; internal/lambda/app wires it.
package main

import (
	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
)

func main() {
	app.StartLambda("router", app.Router, func(h *router.Router) any { return h.Handle })
}
