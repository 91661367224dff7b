// Command starter is the sfnlimit starter Lambda function; internal/app wires it.
package main

import (
	"github.com/sfnlimit/sfnlimit/internal/app"
	"github.com/sfnlimit/sfnlimit/internal/starter"
)

func main() {
	app.StartLambda("starter", app.Starter, func(h *starter.Starter) any { return h.Handle })
}
