# Accept a replay-tui SLSA v1 provenance statement only when the training run it records
# ran in the image with the digest the auditor expects (data.image_digest, hex sha256),
# from a recorded commit, and with every data input hashed.
#
# Input: the in-toto Statement that `cosign verify-blob-attestation --type slsaprovenance1`
# verified (the envelope's payload, base64-decoded).  `deny` says what is wrong; `allow`
# holds when nothing is.  See docs/evidence.md.
package replaytui.slsa

import rego.v1

deps := input.predicate.buildDefinition.resolvedDependencies

deny contains "not an in-toto Statement v1" if {
	input._type != "https://in-toto.io/Statement/v1"
}

deny contains "not SLSA v1 provenance" if {
	input.predicateType != "https://slsa.dev/provenance/v1"
}

deny contains "not a replay-tui training run" if {
	input.predicate.buildDefinition.buildType != "https://replay-tui.dev/buildtypes/training-run/v1"
}

deny contains sprintf("the run did not use image sha256:%s", [data.image_digest]) if {
	not image_matches
}

deny contains "no source commit recorded" if {
	not source_commit
}

deny contains sprintf("data input %s is not hashed", [dep.name]) if {
	some dep in deps
	startswith(dep.name, "data:")
	not dep.digest.sha256
}

image_matches if {
	some dep in deps
	dep.name == "image"
	dep.digest.sha256 == data.image_digest
}

source_commit if {
	some dep in deps
	dep.name == "source"
	dep.digest.gitCommit
}

default allow := false

allow if count(deny) == 0
