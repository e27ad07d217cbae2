#!/usr/bin/perl
# tapcheck.pl FILE: reads a TAP file with TAP::Parser (the parser prove
# uses) and prints, for each failed test, "not ok: DESCRIPTION type=TYPE"
# (TYPE from its YAML block), then one line of counts.  Dies on a parse
# error or a YAML block that is not a mapping.  Used by tests/ci.bats.
use strict;
use warnings;
use TAP::Parser;

my $p = TAP::Parser->new({ source => $ARGV[0] });
my ($tests, $skip, $todo, $yaml, $last) = (0, 0, 0, 0, undef);
while (my $r = $p->next) {
	if ($r->is_test) {
		$tests++;
		$skip++ if $r->has_skip;
		$todo++ if $r->has_todo;
		$last = $r;
	} elsif ($r->is_yaml) {
		my $d = $r->data;
		die "YAML block is not a mapping\n" unless ref $d eq 'HASH';
		die "YAML block without verdict\n" unless $d->{verdict};
		$yaml++;
		if ($last && !$last->is_ok) {
			(my $desc = $last->description) =~ s/^- //;
			print "not ok: $desc type=$d->{type}\n";
		}
	}
}
my @errors = $p->parse_errors;
die "parse errors: @errors\n" if @errors;
printf "version=%s planned=%d tests=%d passed=%d failed=%d skip=%d todo=%d yaml=%d\n",
	$p->version, $p->tests_planned, $tests, scalar($p->passed),
	scalar($p->failed), $skip, $todo, $yaml;
