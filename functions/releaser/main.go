// Command releaser is the sfnlimit releaser Lambda function; internal/app wires it.
package main

import (
	"github.com/sfnlimit/sfnlimit/internal/app"
	"github.com/sfnlimit/sfnlimit/internal/releaser"
)

func main() {
	app.StartLambda("releaser", app.Releaser, func(h *releaser.Handler) any { return h.Handle })
}
