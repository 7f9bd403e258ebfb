#!/usr/bin/perl
# Test-only (never installed): the agent core's own parser, without running anything. It loads the
# core's subs (`require`: the core runs main only as a program), sets the config, then reads one
# JSON string per line on stdin, each a whole command line, and prints per line, as JSON, the argv
# the core would run for it, or its refusal. Usage: perl explain.pl CORE CONFIG
use v5.36;
use JSON::PP ();

my ($core, $config) = @ARGV;
die "usage: explain.pl CORE CONFIG\n" unless defined $core && defined $config;
require $core;
$main::CFG = main::load_config($config);
my $g = main::load_grammar($main::CFG->{grammar});

sub explain_line ($line) {
  my $r = eval {
    # The front's checks, then its split, exactly.
    main::refuse('bytes') if $line =~ /[^A-Za-z0-9 _.:+-]/;
    main::refuse('length') if length($line) > main::MAX_LINE();
    main::refuse('spaces') if $line =~ /\A | \z|  /;
    my @w = split / /, $line;
    my $cmd = main::parse_command($g, @w);
    return { ok => JSON::PP::true, version => 1 } if $cmd->{version};
    my @parts = $cmd->{batch} ? @{ $cmd->{batch} } : ($cmd);
    my @out = map {
      my $c = main::command_of($_, $cmd->{where}, $cmd->{batch} ? $_->{ms} : $cmd->{ms}, 0);
      { verb => $_->{verb}, argv => $c->{argv}, timeoutMs => $c->{ms}, destructive => $_->{def}{destructive} ? JSON::PP::true : JSON::PP::false }
    } @parts;
    return { ok => JSON::PP::true, batch => $cmd->{batch} ? JSON::PP::true : JSON::PP::false, parts => \@out };
  };
  return $r if $r;
  my $e = $@;
  return { ok => JSON::PP::false, reason => ref $e eq 'Refusal' ? $e->{why} : "internal: $e" };
}

binmode(STDOUT, ':raw');
my $dec = JSON::PP->new->allow_nonref;
my $enc = JSON::PP->new->canonical(1);
while (my $l = <STDIN>) {
  chomp $l;
  my $s = eval { $dec->decode($l) };
  my $r = defined $s && !ref $s ? explain_line($s) : { ok => JSON::PP::false, reason => 'not a JSON string' };
  print $enc->encode($r), "\n";
}
