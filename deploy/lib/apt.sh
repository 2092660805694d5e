# Sourced by the deploy scripts that install a Debian package when a tool is
# missing (deploy/zookeeper/zookeeper.sh, deploy/browser/chromium.sh).
#
#   apt_install <package> <check command...>
#
# Installs <package> with apt-get unless <check command...> succeeds. Runs as
# root, or through passwordless sudo. One install at a time: the tests start
# these scripts in parallel, and two apt-gets at once collide on dpkg's lock
# (the loser fails at once). So the install holds an flock of its own, checks
# again once it has it (a parallel run may have installed the package
# meanwhile), and asks apt-get to wait for dpkg's lock held by anyone else.
# The caller defines `die`.

apt_install() {
    local pkg="$1"
    shift
    "$@" && return 0
    command -v apt-get >/dev/null || die "$pkg is missing and there is no apt-get: install Debian's $pkg package"
    local -a sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || die "$pkg is missing; run as root or install sudo (apt-get install -y $pkg)"
        sudo=(sudo -n)
    fi
    local lock="${TMPDIR:-/tmp}/paceline-apt-install.lock" fd
    exec {fd}>>"$lock"
    flock "$fd"
    if "$@"; then
        flock -u "$fd"
        return 0
    fi
    echo "$(basename "$0"): installing Debian's $pkg package with apt-get (once)" >&2
    local -a get=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$pkg")
    if ! "${sudo[@]}" "${get[@]}" >&2; then
        "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || true
        "${sudo[@]}" "${get[@]}" >&2 || { flock -u "$fd"; die "apt-get could not install $pkg"; }
    fi
    flock -u "$fd"
}
