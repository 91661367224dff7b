//go:build race

package simworld

const raceOn = true
