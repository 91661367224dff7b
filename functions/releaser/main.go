// Command releaser is the sfnlimit releaser Lambda function; internal/lambda/app wires it.
package main

import (
	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
)

func main() {
	app.StartLambda("releaser", app.Releaser, func(h *releaser.Handler) any { return h.Handle })
}
