package cfntemplate

import "strings"

// MaxStackName is the longest stack name the template deploys under (CloudFormation allows 128).
// The LanesQueue's name is generated: "{stack}-LanesQueue-{12 or 13 random characters}", and
// ".fifo" is appended without shortening the name to fit SQS's 80 characters (an open
// CloudFormation bug, aws-cloudformation/cloudformation-coverage-roadmap#280; whether the generated
// part is first cut to 80 or not at all, the bound is the same), so the generated part must stay
// within 75: 75 - len("-LanesQueue-") - 13 = 50. The names the template sets are shorter for any stack
// name up to it (the sample workflow's "{stack}-sample" fits Step Functions' 80 up to 73).
const MaxStackName = 50

// generatedSuffix is the longest random suffix CloudFormation gives a generated name.
const generatedSuffix = 13

// GeneratedQueueName is the name CloudFormation generates for a queue that sets no QueueName, with
// the suffix at its longest: cut to 80, and ".fifo" appended after the cut for a FIFO queue.
func GeneratedQueueName(stack, logicalID string, fifo bool) string {
	name := stack + "-" + logicalID + "-" + strings.Repeat("X", generatedSuffix)
	if len(name) > 80 {
		name = name[:80]
	}
	if fifo {
		name += ".fifo"
	}
	return name
}
