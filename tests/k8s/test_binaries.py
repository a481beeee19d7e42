"""Pure parts of the binary builder; no Go, no cluster."""

from .binaries import staging_replacements, version_ldflags

KUBERNETES_GO_MOD = """module k8s.io/kubernetes

require (
\tgithub.com/spf13/cobra v1.10.0
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tk8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
)
"""


def test_staging_modules_map_to_their_published_release_only_when_required() -> None:
    assert staging_replacements(KUBERNETES_GO_MOD, "v1.36.3") == {
        "k8s.io/api": "v0.36.3",
        "k8s.io/client-go": "v0.36.3",
    }


def test_version_ldflags_stamp_the_release_into_component_base_and_client_go() -> None:
    flags = version_ldflags("v1.36.3")
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/component-base/version.gitMinor=36" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMajor=1" in flags
