# shellcheck shell=bash
# Shared by bootstrap.sh and setup-maxtext.sh (sourced, not run): phase lines, a heartbeat for long
# steps, and installer output kept in a log file. Installer output reaches the screen only with
# CVS_TUI_SETUP_VERBOSE=1 (or -v); on failure the log's tail is shown with its path.
# Everything goes to stderr, so a script's stdout stays machine-readable.
# Names start with cvs_setup_ because bootstrap.sh is sourced into other scripts.

CVS_SETUP_TAG=${CVS_SETUP_TAG:-cvs-tui set-up}
# Seconds between heartbeat lines when stderr is not a terminal (CI logs, pipes): under the 10 s
# that a person waits before wondering whether it hangs.
CVS_SETUP_BEAT_S=${CVS_SETUP_BEAT_S:-8}

# Epoch second of the last line printed, so that the heartbeat keeps the gap between any two
# lines (not just within one step) under CVS_SETUP_BEAT_S.
printf -v CVS_SETUP_LAST_T '%(%s)T' -1

cvs_setup_say() {
    printf '%s %s\n' "$CVS_SETUP_TAG" "$*" >&2
    printf -v CVS_SETUP_LAST_T '%(%s)T' -1
}

cvs_setup_verbose() { [[ "${CVS_TUI_SETUP_VERBOSE:-0}" =~ ^(1|true|yes|on)$ ]]; }

# "42 s", "2 min 05 s"
cvs_setup_dur() {
    if (($1 >= 60)); then printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); else printf '%d s' "$1"; fi
}

# A path as the user would type it from the current directory.
cvs_setup_pretty() { local p=$1; [[ $p == "$PWD"/* ]] && p=${p#"$PWD"/}; printf '%s' "$p"; }

# The last non-empty line of a log, without colour codes or carriage-return progress.
cvs_setup_last_line() {
    [[ -s $1 ]] || return 0
    # pip's "WARNING: Location ... is ignored" comes from a machine's index settings, not progress
    tail -c 8192 "$1" | tr '\r' '\n' | sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/^[[:space:]]*//' \
        | awk 'NF && !/^WARNING: Location / { l = $0 } END { print l }'
}

# TEXT made to fit WIDTH columns without ending mid-phrase: a closing "(...)" aside goes first, then
# whole words, with "…" to show that something was cut.
cvs_setup_fit() {
    local s=$1 w=$2
    while ((${#s} > w)) && [[ $s == *" ("*")" ]]; do s=${s% (*}; done
    if ((${#s} > w)); then
        s=${s:0:w-1}
        [[ $s == *" "* ]] && s=${s% *}
        s="$s…"
    fi
    printf '%s' "$s"
}

# Runs in the background while a step runs: says how long the step has taken and what it waits
# on (HINT_FN LOG prints that). On a terminal one line is redrawn every second; elsewhere a plain
# line is printed every CVS_SETUP_BEAT_S seconds. It stops by itself if the calling shell dies.
cvs_setup_heartbeat() {
    local log=$1 hint=$2 t0 now what el cols=100 n=0 spin='|/-\' tty=0
    printf -v t0 '%(%s)T' -1
    if [[ -t 2 ]] && ! cvs_setup_verbose; then
        tty=1
        cols=$(tput cols 2>/dev/null || echo 100)
    fi
    while kill -0 $$ 2>/dev/null; do
        sleep 1
        printf -v now '%(%s)T' -1
        el=$((now - t0))
        what=$("$hint" "$log" 2>/dev/null || true)
        if ((tty)); then
            what="  ${spin:n++%4:1} ${el} s  ${what}"
            printf '\r\033[K%s' "$(cvs_setup_fit "$what" $((cols - 1)))" >&2
        elif ((now - CVS_SETUP_LAST_T >= CVS_SETUP_BEAT_S)); then
            cvs_setup_say "      ... ${el} s: ${what}"
        fi
    done
}

# Hint for a step whose installer writes its own progress: the log's last line, shortened.
cvs_setup_hint_log() {
    local l
    l=$(cvs_setup_last_line "$1")
    [[ -n $l ]] || l="starting"
    printf '%s%s' "${CVS_SETUP_DOING:+$CVS_SETUP_DOING: }" "${l:0:90}"
}

# Hint for pip: its last line, with the long silent stages named.
cvs_setup_hint_pip() {
    local l n
    l=$(cvs_setup_last_line "$1")
    case $l in
    "Installing collected packages:"*)
        n=$(($(tr -cd , <<<"$l" | wc -c) + 1))
        l="installing $n packages (unpacking wheels, writing files; no output until it ends)"
        ;;
    "Building editable for"* | "Building wheel for"*) l="${l%%:*} (compiling C code)" ;;
    "") l="starting" ;;
    esac
    printf '%spip: %s' "${CVS_SETUP_DOING:+$CVS_SETUP_DOING: }" "${l:0:90}"
}

# Hint for python -m venv, which prints nothing while ensurepip installs pip.
cvs_setup_hint_venv() {
    printf 'python -m venv: creating the environment and installing its own pip (no output until it ends)'
}

# cvs_setup_step LOG HINT_FN CMD...
# Runs CMD with stdout and stderr appended to LOG (and shown too, when verbose) under a heartbeat.
# On failure prints the last lines of LOG and its path; returns CMD's exit status.
cvs_setup_step() {
    local log=$1 hint=$2 rc=0 hb off now
    shift 2
    off=$(stat -c %s "$log" 2>/dev/null || echo 0)
    cvs_setup_heartbeat "$log" "$hint" &
    hb=$!
    if cvs_setup_verbose; then
        "$@" 2>&1 </dev/null | tee -a "$log" >&2 || rc=$?
    else
        "$@" >>"$log" 2>&1 </dev/null || rc=$?
    fi
    kill "$hb" 2>/dev/null || true
    wait "$hb" 2>/dev/null || true
    # The heartbeat printed (in its own process) every CVS_SETUP_BEAT_S s since the last line.
    printf -v now '%(%s)T' -1
    ((CVS_SETUP_LAST_T += (now - CVS_SETUP_LAST_T) / CVS_SETUP_BEAT_S * CVS_SETUP_BEAT_S)) || true
    if [[ -t 2 ]] && ! cvs_setup_verbose; then printf '\r\033[K' >&2; fi
    if ((rc != 0)); then
        cvs_setup_say "error: '$*' failed (exit $rc); its last lines in $(cvs_setup_pretty "$log"):"
        tail -c +$((off + 1)) "$log" | tail -n 30 | sed 's/^/    | /' >&2
        cvs_setup_say "full output: $(cvs_setup_pretty "$log") (rerun with CVS_TUI_SETUP_VERBOSE=1 to see it live)"
    fi
    return "$rc"
}
