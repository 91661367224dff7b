// Command starter is the sfnlimit starter Lambda function; internal/lambda/app wires it.
package main

import (
	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
)

func main() {
	app.StartLambda("starter", app.Starter, func(h *starter.Starter) any { return h.Handle })
}
