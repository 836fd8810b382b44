# text.pl WORDS ROUNDS: a string- and hash-heavy Perl workload for
# bench/apps.sh.  Each round makes a text of WORDS words (3-12 letters, from
# a fixed generator), counts them in a hash, builds a line per distinct word
# with a regex substitution and sprintf, sorts the lines, and keeps one
# round's hash of arrays alive into the next.  Prints integer checks only
# (no hash order), so the output is the same on every perl and allocator:
# apps.sh compares it with the expected lines.
use strict;
use warnings;

my ($words, $rounds) = (shift // 300000, shift // 4);
my $x = 7;
sub rnd { $x = $x * 48271 % 2147483647; return $x % $_[0]; }   # Park-Miller

my ($distinct, $chars, $kept) = (0, 0, {});
for my $round (1 .. $rounds) {
    my @text = map { join "", map { chr(97 + rnd(rnd(2) ? 6 : 26)) } 1 .. 3 + rnd(10) } 1 .. $words;
    my %count;
    $count{$_}++ for @text;
    my @lines = sort map { (my $w = $_) =~ s/([aeiou])/uc $1/ge; sprintf "%s:%d", $w, $count{$_} } keys %count;
    $distinct += @lines;
    $chars += length join "\n", @lines;
    my %next;
    push @{ $next{ substr $_, 0, 2 } }, $_ for @lines;
    $chars += scalar(keys %$kept);
    $kept = \%next;
}
print "distinct $distinct\nchars $chars\n";
