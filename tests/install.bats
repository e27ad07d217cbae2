#!/usr/bin/env bats
# make install: the binary, the libraries with their soname, the header, the
# pkg-config file and the man pages land under PREFIX, and a program built
# with `pkg-config --cflags --libs distrun` runs under the installed distrun.

load common

setup() {
	PREFIX=$(mktemp -d)
	# Install the build under test; a sanitizer build's programs need the
	# sanitizer runtime too.
	SAN=
	case $B in *asan*) SAN="-fsanitize=address,undefined" ;; esac
}

teardown() {
	rm -rf "$PREFIX"
}

install_tree() {
	env -u MAKEFLAGS -u MAKELEVEL make -s -C "$SRCDIR" install PREFIX="$PREFIX" \
		B="$B" ${SAN:+ASAN=1} >/dev/null
}

@test "make install puts binary, libraries, header, pkg-config file and man pages under PREFIX" {
	install_tree
	[ -x "$PREFIX/bin/distrun" ]
	[ -f "$PREFIX/lib/libdistrun.a" ]
	[ -f "$PREFIX/include/distrun.h" ]
	[ -f "$PREFIX/share/man/man1/distrun.1" ]
	[ -f "$PREFIX/share/man/man3/distrun.3" ]
	run readelf -d "$PREFIX/lib/libdistrun.so.0.1.0"
	[[ "$output" == *"SONAME"*"libdistrun.so.0"* ]]
	[ "$(readlink "$PREFIX/lib/libdistrun.so")" = libdistrun.so.0 ]
	run env PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --modversion distrun
	[ "$status" -eq 0 ]
	[ "$output" = 0.1.0 ]
}

@test "the shared library exports the dr_ API and nothing internal" {
	install_tree
	run nm -D --defined-only "$PREFIX/lib/libdistrun.so.0.1.0"
	[ "$status" -eq 0 ]
	[[ "$output" == *" T dr_all_reduce"* ]]
	[[ "$output" == *" T dr_init_process_group"* ]]
	internal=$(grep -c ' [TDB] dri_' <<<"$output" || true)
	[ "$internal" -eq 0 ]
}

@test "a program built with pkg-config runs under the installed distrun (shared and static)" {
	install_tree
	cat >"$PREFIX/prog.c" <<-'C'
	#include <distrun.h>
	#include <stdio.h>
	int main(void)
	{
		if (dr_init_process_group(NULL, NULL)) {
			fprintf(stderr, "init: %s\n", dr_last_error());
			return 1;
		}
		int x = dr_get_rank() + 1;
		if (dr_all_reduce(&x, 1, DR_INT32, DR_SUM, NULL, NULL)) {
			fprintf(stderr, "all_reduce: %s\n", dr_last_error());
			return 1;
		}
		printf("rank %d of %d: sum %d\n", dr_get_rank(), dr_get_world_size(), x);
		return dr_destroy_process_group() != DR_OK;
	}
	C
	export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
	cc $SAN -o "$PREFIX/prog" "$PREFIX/prog.c" $(pkg-config --cflags --libs distrun)
	cc $SAN -o "$PREFIX/prog-static" "$PREFIX/prog.c" $(pkg-config --cflags distrun) \
		"$PREFIX/lib/libdistrun.a" $(pkg-config --libs-only-l --static distrun | sed 's/-ldistrun//')
	# No LD_LIBRARY_PATH: the .pc's rpath finds the library.
	run env -u LD_LIBRARY_PATH "$PREFIX/bin/distrun" -n 3 "$PREFIX/prog"
	[ "$status" -eq 0 ]
	[[ "$output" == *"[0] rank 0 of 3: sum 6"* ]]
	[[ "$output" == *"[2] rank 2 of 3: sum 6"* ]]
	run "$PREFIX/bin/distrun" -n 2 "$PREFIX/prog-static"
	[ "$status" -eq 0 ]
	[[ "$output" == *"[1] rank 1 of 2: sum 3"* ]]
}

@test "the .pc has an rpath for a non-system prefix, none for /usr or /usr/local (ldconfig there)" {
	install_tree
	grep -qx 'Libs: -L${libdir} -Wl,-rpath,${libdir} -ldistrun' "$PREFIX/lib/pkgconfig/distrun.pc"
	for p in /usr /usr/local; do
		d=$(mktemp -d)
		env -u MAKEFLAGS -u MAKELEVEL make -s -C "$SRCDIR" install DESTDIR="$d" PREFIX="$p" \
			B="$B" ${SAN:+ASAN=1} >/dev/null
		run grep '^Libs:' "$d$p/lib/pkgconfig/distrun.pc"
		rm -rf "$d"
		[ "$output" = 'Libs: -L${libdir} -ldistrun' ]
	done
}

@test "make install puts distrun_torch beside the helper and where python3 looks; each copy finds the installed library" {
	require_torch
	[ -z "$SAN" ] || skip "libdistrun of a sanitizer build does not load into python3"
	install_tree
	pyver=$("$TORCH_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	[ -f "$PREFIX/share/distrun/python/distrun_torch/__init__.py" ]
	[ -f "$PREFIX/lib/python$pyver/dist-packages/distrun_torch/_pg.py" ]
	[ -f "$PREFIX/share/man/man7/distrun_torch.7" ]
	# ranks of the installed distrun import it with no PYTHONPATH of theirs
	run env -u PYTHONPATH "$PREFIX/bin/distrun" -n 2 "$TORCH_PYTHON" -c '
import torch, torch.distributed as dist, distrun_torch
dist.init_process_group("distrun")
t = torch.ones(1); dist.all_reduce(t)
print(distrun_torch.library_path, t.item())
dist.destroy_process_group()'
	[ "$status" -eq 0 ]
	[[ "$output" == *"[1] $PREFIX/lib/libdistrun.so.0 2.0"* ]]
	# the dist-packages copy (what torchrun's ranks import) finds it too
	run env PYTHONPATH="$PREFIX/lib/python$pyver/dist-packages" "$TORCH_PYTHON" -c \
		'import distrun_torch; print(distrun_torch.library_path, distrun_torch.__file__)'
	[ "$status" -eq 0 ]
	[ "$output" = "$PREFIX/lib/libdistrun.so.0 $PREFIX/lib/python$pyver/dist-packages/distrun_torch/__init__.py" ]
}

@test "for PREFIX=/usr/local distrun_torch lands on Debian python3's own path" {
	require_torch
	d=$(mktemp -d)
	env -u MAKEFLAGS -u MAKELEVEL make -s -C "$SRCDIR" install DESTDIR="$d" PREFIX=/usr/local \
		B="$B" ${SAN:+ASAN=1} >/dev/null
	site=$("$TORCH_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	[ -f "$d$site/distrun_torch/__init__.py" ]
	run "$TORCH_PYTHON" -c "import sys; print('$site' in sys.path)"
	rm -rf "$d"
	[ "$output" = True ]
}
