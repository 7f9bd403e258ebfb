#!/usr/bin/perl
# gpu-medic-agent core (protocol v1, agent/PROTOCOL.md; docs/agent.md).
#
# Runs as root (through the sudoers entry, or directly in the root-forced mode). The sh front
# (gpu-medic-agent) checked the SSH command line's bytes and split it into words; this core checks
# every word again against the grammar (agent/grammar.json, root-owned), builds the argv from the
# grammar's run template only, resolves the program through the config's path= only and execs it
# with no shell for the words. Destructive verbs need signed envelopes on stdin, verified with
# OpenSSL, and write an audit line before and after. A refusal is one line on stderr and exit 126.
#
# Options (only before `--`): --config FILE (the front's own constant), --refuse WORD (the front
# refused the line: audit it here, as root). Everything after `--` is the command's words. It has no
# mode for tests: they load its subs from agent/test/explain.pl, and the test fleet logs lines in
# a wrapper of its own around the front.
use v5.36;
use JSON::PP ();
use MIME::Base64 qw(encode_base64 decode_base64);
use Digest::SHA qw(sha256_hex);
use POSIX qw(:sys_wait_h setpgid _exit);
use File::Temp qw(tempdir);
use Cwd ();
use File::Path ();
use Fcntl qw(:flock O_RDWR O_CREAT);
use IO::Poll qw(POLLOUT POLLERR POLLHUP);
use IO::Select ();
use Time::HiRes qw(time sleep);
no warnings qw(exec);

use constant {
  REFUSED_STATUS  => 126,
  MAX_LINE        => 4096,
  MAX_WORD        => 128,
  MAX_VARIADIC    => 256,
  MAX_TIMEOUT_MS  => 600000,
  MAX_STDIN       => 262144,
  PART_CAP        => 262144,
  CT_EXTRA_MS     => 2000,
  KILL_AFTER_S    => 1,
  STDIN_WAIT_S    => 30,
  MAX_FUTURE_MS   => 60000,
  KILL_GIVEUP_S   => 3,
  RELAY_CAP       => 16777216,
  BUSY_STATUS     => 75,
  DESTRUCTIVE_SLOT_WAIT_S => 10,
  MAX_DECISIONS   => 4,
};
use constant DEFAULT_CONFIG => '/etc/gpu-medic/agent.conf';
use constant WORD_RE => qr/\A[A-Za-z0-9_.:+-]{1,128}\z/;
# The front's own refusal reasons (--refuse WORD): a fixed list, so nothing the caller sent reaches the audit line.
my %FRONT_REASONS = (
  none   => 'no command (an interactive login or a subsystem)',
  bytes  => 'a byte outside [A-Za-z0-9 _.:+-]',
  length => 'longer than 4096 bytes',
  spaces => 'words not separated by single spaces',
  word   => 'a word longer than 128 bytes',
);

my %audit_ctx = (verb => '-', where => '-', incident => '-', approval => '-', targets => '-');
# The config in force (our, so agent/test/explain.pl can set it when it loads these subs).
our $CFG;

# ---------------------------------------------------------------- refusals and audit

package Refusal { sub new ($c, $why) { bless { why => $why }, $c } }
sub refuse ($why) { die Refusal->new($why) }

sub clean ($s) { $s = "$s"; $s =~ s/[^\x20-\x7e]/?/g; return substr($s, 0, 300) }

sub audit_line ($what, %f) {
  my %a = (%audit_ctx, %f);
  my $line = "gpu-medic-agent[$$]: $what verb=$a{verb} where=$a{where} incident=$a{incident}"
    . " approval=$a{approval} targets=$a{targets} reason=" . clean($a{reason} // '-')
    . " status=" . ($a{status} // '-');
  return $line;
}

# One audit line: via logger when /dev/log is a socket, else appended to audit_file. False when neither worked.
sub audit ($what, %f) {
  my $line = audit_line($what, %f);
  if (-S '/dev/log') {
    my $logger = $CFG ? find_program('logger') : undef;
    if (defined $logger) {
      my $pid = fork;
      if (defined $pid && $pid == 0) {
        open(STDIN, '<', '/dev/null'); open(STDOUT, '>', '/dev/null'); open(STDERR, '>', '/dev/null');
        exec { $logger } 'logger', '-t', 'gpu-medic-agent', '-p', 'auth.notice', '--', $line;
        _exit(127);
      }
      if (defined $pid) { waitpid($pid, 0); return 1 if $? == 0; }
    }
  }
  my $file = $CFG ? $CFG->{audit_file} : '/var/log/gpu-medic/agent-audit.log';
  return 0 unless defined $file && $file =~ m{\A/};
  my $ok = open(my $h, '>>', $file);
  return 0 unless $ok;
  $ok = print {$h} "$line\n";
  $ok = close($h) && $ok;
  return $ok ? 1 : 0;
}

sub refused_exit ($why) {
  audit('refused', reason => $why);
  print STDERR "gpu-medic-agent: refused: " . clean($why) . "\n";
  exit REFUSED_STATUS;
}

# ---------------------------------------------------------------- config and grammar

sub root_owned_file ($path, $what) {
  my @st = stat($path);
  refuse("$what $path is missing") unless @st;
  refuse("$what $path is not a plain file") unless -f _;
  refuse("$what $path is not owned by root") unless $st[4] == 0;
  refuse("$what $path is writable by others than root") if $st[2] & 022;
  return 1;
}

sub slurp ($path) {
  open(my $h, '<', $path) or refuse("cannot read $path");
  local $/; my $s = <$h>; close $h; return $s // '';
}

sub load_config ($path) {
  root_owned_file($path, 'config');
  my %c = (
    path => '/usr/sbin:/usr/bin:/sbin:/bin',
    bot_keys => '/etc/gpu-medic/bot.pub.pem',
    worker_keys => '/etc/gpu-medic/worker.pub.pem',
    audit_file => '/var/log/gpu-medic/agent-audit.log',
    role => 'host',
    grammar => '/usr/local/lib/gpu-medic/grammar.json',
    unprivileged => 'no',
    machine => '',
    vmid => '',
    max_lifetime_s => '900',
    max_runs => '8',
    run_dir => '/run/gpu-medic',
  );
  for my $raw (split /\n/, slurp($path)) {
    my $l = $raw =~ s/\A\s+|\s+\z//gr;
    next if $l eq '' || $l =~ /\A#/;
    my ($k, $v) = $l =~ /\A([a-z_]+)\s*=\s*(.*)\z/ or refuse("config $path: unreadable line");
    refuse("config $path: unknown key $k") unless exists $c{$k};
    $c{$k} = $v;
  }
  refuse("config $path: role must be host or self") unless $c{role} =~ /\A(host|self)\z/;
  refuse("config $path: unprivileged must be yes or no") unless $c{unprivileged} =~ /\A(yes|no)\z/;
  refuse("config $path: unprivileged=yes needs role=self") if $c{unprivileged} eq 'yes' && $c{role} ne 'self';
  for my $d (split /:/, $c{path}) { refuse("config $path: path= holds a relative dir") unless $d =~ m{\A/}; }
  refuse("config $path: machine= is not an inventory id") unless $c{machine} eq '' || $c{machine} =~ /\A[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\z/;
  refuse("config $path: vmid= is not a container id") unless $c{vmid} eq '' || $c{vmid} =~ /\A[1-9][0-9]{2,8}\z/;
  refuse("config $path: vmid= is for role=self only") if $c{vmid} ne '' && $c{role} ne 'self';
  refuse("config $path: max_lifetime_s= must be 1-86400") unless $c{max_lifetime_s} =~ /\A[1-9][0-9]{0,4}\z/ && $c{max_lifetime_s} <= 86400;
  refuse("config $path: max_runs= must be 2-256") unless $c{max_runs} =~ /\A[1-9][0-9]{0,2}\z/ && $c{max_runs} >= 2 && $c{max_runs} <= 256;
  refuse("config $path: run_dir= must be absolute") unless $c{run_dir} =~ m{\A/[A-Za-z0-9/_.-]*\z};
  return \%c;
}

# A script the grammar names: a plain root-owned file in scripts/ beside the grammar, whose bytes must
# have the SHA-256 the grammar gives; its text is the argv word (after `sh -c`, `perl -e` ...).
sub script_text ($g, $part) {
  my $name = $part->{script} // '';
  refuse("grammar: a script name $name is not a plain file name") unless $name =~ /\A[a-z0-9][a-z0-9-]*\.(sh|pl|py)\z/;
  return $g->{scripts}{$name} if exists $g->{scripts}{$name};
  my $file = "$g->{dir}/scripts/$name";
  root_owned_file($file, 'script');
  my $text = slurp($file);
  refuse("script $file does not match its checksum in the grammar") unless sha256_hex($text) eq lc($part->{sha256} // '');
  return $g->{scripts}{$name} = $text;
}

sub load_grammar ($path) {
  root_owned_file($path, 'grammar');
  my $g = eval { JSON::PP->new->decode(slurp($path)) };
  refuse("grammar $path is not JSON") unless ref $g eq 'HASH';
  refuse("grammar $path is not protocol 1") unless ($g->{protocol} // '') eq '1';
  my $lim = $g->{limits};
  refuse("grammar $path has no limits") unless ref $lim eq 'HASH'
    && ($lim->{batchParts} // '') =~ /\A[1-9][0-9]{0,2}\z/ && ($lim->{readTimeoutMs} // '') =~ /\A[1-9][0-9]{0,5}\z/;
  my %re;
  # Anchored here whatever the grammar wrote: a type matches a whole word or nothing.
  for my $t (keys %{ $g->{types} // {} }) { my $src = $g->{types}{$t}; $re{$t} = qr/\A(?:$src)\z/; }
  $g->{re} = \%re;
  $g->{dir} = $path =~ s{/[^/]*\z}{}r;
  $g->{scripts} = {};
  for my $v (keys %{ $g->{verbs} // {} }) {
    my $d = $g->{verbs}{$v};
    for my $t (@{ $d->{args} }, defined $d->{variadic} ? ($d->{variadic}) : ()) {
      refuse("grammar: verb $v names unknown type $t") unless $re{$t};
    }
    my $r0 = $d->{run}[0];
    refuse("grammar: verb $v: run[0] must be a program name") unless defined $r0 && !ref $r0 && $r0 =~ /\A[A-Za-z0-9_.+-]+\z/;
  }
  return $g;
}

# run[0] through the config's path= only (never the caller's PATH).
# The program found must be root's alone (or, unprivileged, this account's): the file and every
# directory on its real path owned by root (or us, or in a container the host, unmapped) and
# writable by nobody else, but for a sticky
# directory (such as /tmp), whose other users cannot replace what root owns in it. A program a
# non-root user could swap would run as root: it is refused, not run.
sub find_program ($name) {
  return undef unless $name =~ /\A[A-Za-z0-9_.+-]+\z/;
  for my $d (split /:/, $CFG->{path}) {
    my $p = "$d/$name";
    next unless -f $p && -x _;
    my $why = unsafe_path($p);
    refuse("$name on path= is not root's alone ($why)") if defined $why;
    return $p;
  }
  return undef;
}

# Inside a user namespace (an unprivileged container), files of the host that the namespace does not
# map show as the overflow uid (nobody): no one inside can write them, only the host's root can.
sub unmapped_uid () {
  open(my $h, '<', '/proc/self/uid_map') or return -1;
  my $map = do { local $/; <$h> } // '';
  close $h;
  return -1 if $map =~ /\A\s*0\s+0\s+4294967295\s*\z/;
  open(my $o, '<', '/proc/sys/kernel/overflowuid') or return 65534;
  my $u = <$o> // '65534';
  close $o;
  return $u =~ /\A\s*([0-9]+)\s*\z/ ? $1 : 65534;
}

sub unsafe_path ($p) {
  my $unmapped = unmapped_uid();
  my $ours = sub ($uid) { $uid == 0 || $uid == $> || $uid == $unmapped };
  my $real = Cwd::realpath($p);
  return "cannot resolve $p" unless defined $real;
  my @parts = grep { $_ ne '' } split m{/}, $real;
  my $file = pop @parts;
  my @dirs = ('/');
  push @dirs, '/' . join('/', @parts[0 .. $_]) for 0 .. $#parts;
  for my $d (@dirs) {
    my @st = stat($d);
    return "cannot stat $d" unless @st;
    return "$d is owned by uid $st[4]" unless $ours->($st[4]);
    return "$d is writable by others" if ($st[2] & 022) && !($st[2] & 01000);
  }
  my @st = stat($real);
  return "$real is owned by uid $st[4]" unless @st && $ours->($st[4]);
  return "$real is writable by others" if $st[2] & 022;
  return undef;
}

# ---------------------------------------------------------------- parsing

sub typed ($g, $type, $w) {
  my $re = $g->{re}{$type};
  refuse("grammar: no type $type") unless defined $re;
  return $w =~ $re;
}

# One verb and its arguments against the grammar: the argv its run template makes, and what the checks need.
sub parse_verb ($g, $where, $words) {
  my ($verb, @args) = @$words;
  refuse('no verb') unless defined $verb;
  $audit_ctx{verb} = $verb;    # a word the front and parse_command already checked: [A-Za-z0-9_.:+-]{1,128}
  my $d = $g->{verbs}{$verb};
  refuse("unknown verb $verb") unless ref $d eq 'HASH' && $verb =~ /\A[a-z][a-z0-9-]*\z/;
  my $on = $where->{kind};
  $on = 'self' if $on eq 'host' && $CFG->{role} eq 'self';
  refuse("verb $verb is not allowed on $on") unless grep { $_ eq $on } @{ $d->{on} };
  my @fixed = @{ $d->{args} };
  refuse("verb $verb takes at least " . scalar(@fixed) . " arguments") if @args < @fixed;
  if (!defined $d->{variadic}) {
    refuse("verb $verb takes " . scalar(@fixed) . " arguments") if @args != @fixed;
  } else {
    my $n = @args - @fixed;
    refuse("verb $verb needs at least one more argument") if $n < 1;
    refuse("verb $verb takes at most " . MAX_VARIADIC . " more arguments") if $n > MAX_VARIADIC;
  }
  for my $i (0 .. $#args) {
    my $t = $i < @fixed ? $fixed[$i] : $d->{variadic};
    refuse("argument " . ($i + 1) . " of $verb is not a $t") unless typed($g, $t, $args[$i]);
  }
  my @argv;
  for my $part (@{ $d->{run} }) {
    if (!ref $part) { push @argv, $part; next; }
    if (exists $part->{arg}) {
      my $w = $args[$part->{arg}];
      refuse("grammar: verb $verb uses a missing argument") unless defined $w;
      push @argv, ($part->{prefix} // '') . $w . ($part->{suffix} // '');
    } elsif (exists $part->{rest}) {
      push @argv, @args[$part->{rest} .. $#args] if $part->{rest} <= $#args;
    } elsif (exists $part->{script}) {
      push @argv, script_text($g, $part);
    } else {
      refuse("grammar: verb $verb has an unknown run part");
    }
  }
  return { verb => $verb, def => $d, args => \@args, argv => \@argv };
}

sub timeout_word ($w, $what) {
  refuse("$what is not a timeout in ms") unless $w =~ /\A[1-9][0-9]{0,5}\z/ && $w <= MAX_TIMEOUT_MS;
  return $w + 0;
}

# The whole command: `gpu-medic 1 version` or `gpu-medic 1 <ms> <where...> <verb|batch> ...`.
sub parse_command ($g, @w) {
  refuse('empty command') unless @w;
  for my $w (@w) { refuse('a word outside [A-Za-z0-9_.:+-] or longer than 128 bytes') unless $w =~ WORD_RE; }
  refuse('longer than 4096 bytes') if length(join ' ', @w) > MAX_LINE;
  refuse('not a gpu-medic command') unless $w[0] eq 'gpu-medic';
  refuse('not protocol 1') unless defined $w[1] && $w[1] eq '1';
  if (defined $w[2] && $w[2] eq 'version') {
    refuse('version takes no arguments') if @w != 3;
    return { version => 1 };
  }
  my $ms = timeout_word($w[2] // '', 'the third word');
  my $lim = $g->{limits};
  my $i = 3;
  my $where;
  my $wk = $w[$i] // '';
  if ($wk eq 'host') { $where = { kind => 'host' }; $i++; }
  elsif ($wk eq 'ct') {
    my $vmid = $w[$i + 1] // '';
    refuse('ct needs a container id') unless typed($g, 'vmid', $vmid);
    refuse('ct is not allowed on an agent with role=self') if $CFG->{role} eq 'self';
    $where = { kind => 'ct', vmid => $vmid }; $i += 2;
  } else { refuse('where must be host or ct <vmid>'); }
  $audit_ctx{where} = $where->{kind} eq 'ct' ? "ct:$where->{vmid}" : $where->{kind};
  my @rest = @w[$i .. $#w];
  if (@rest && $rest[0] eq 'batch') {
    shift @rest;
    $audit_ctx{verb} = 'batch';
    my @parts;
    my @cur;
    for my $x (@rest, '+') {
      if ($x eq '+') {
        refuse('an empty part in batch') unless @cur;
        my ($t, @vw) = @cur;
        my $pms = timeout_word($t, 'a batch part\'s timeout');
        my $p = parse_verb($g, $where, \@vw);
        refuse("destructive verb $p->{verb} in a batch") if $p->{def}{destructive};
        refuse("a batch part's timeout is over the reads' $lim->{readTimeoutMs} ms") if $pms > $lim->{readTimeoutMs};
        refuse("a batch of more than $lim->{batchParts} parts") if @parts >= $lim->{batchParts};
        push @parts, { %$p, ms => $pms };
        @cur = ();
        $audit_ctx{verb} = 'batch';
      } else { push @cur, $x; }
    }
    refuse("a read's timeout is over $lim->{readTimeoutMs} ms") if $ms > $lim->{readTimeoutMs};
    return { batch => \@parts, where => $where, ms => $ms };
  }
  my $p = parse_verb($g, $where, \@rest);
  refuse("a read's timeout is over $lim->{readTimeoutMs} ms") if !$p->{def}{destructive} && $ms > $lim->{readTimeoutMs};
  return { %$p, where => $where, ms => $ms };
}

# What the agent runs for one parsed verb: [program path or name, argv...] and its own timeout.
sub command_of ($p, $where, $ms, $resolve) {
  my @argv = @{ $p->{argv} };
  if ($where->{kind} eq 'ct') {
    my $secs = int(($ms + 999) / 1000); $secs = 1 if $secs < 1;
    my $pct = $resolve ? find_program('pct') : 'pct';
    return { prog => $pct, argv => ['pct', 'exec', $where->{vmid}, '--', 'timeout', '-k', '1', "$secs", @argv], ms => $ms + CT_EXTRA_MS };
  }
  # A program missing from path= is the command's own failure (127, as a shell says it), not a refusal:
  # a host without `free` still answers the rest of a batch.
  my $prog = $resolve ? find_program($argv[0]) : $argv[0];
  return { prog => $prog, argv => \@argv, ms => $ms };
}

# ---------------------------------------------------------------- running

# Forks the program in its own process group with stdin from /dev/null and stdout/stderr as given.
sub spawn ($c, $out, $err) {
  my $pid = fork;
  refuse('cannot fork') unless defined $pid;
  if ($pid == 0) {
    setpgid(0, 0);
    $SIG{$_} = 'DEFAULT' for qw(TERM INT HUP PIPE ALRM CHLD);
    open(STDIN, '<', '/dev/null') or _exit(127);
    if (defined $out) { open(STDOUT, '>&', $out) or _exit(127); }
    if (defined $err) { open(STDERR, '>&', $err) or _exit(127); }
    %ENV = (PATH => $CFG->{path});
    if (!defined $c->{prog}) {
      print STDERR "gpu-medic-agent: $c->{argv}[0]: not found (not in the config's path=)\n";
      _exit(127);
    }
    exec { $c->{prog} } @{ $c->{argv} };
    print STDERR "gpu-medic-agent: cannot run $c->{argv}[0]: $!\n";
    _exit(127);
  }
  setpgid($pid, $pid);
  return { pid => $pid, deadline => time + $c->{ms} / 1000, termed => 0, killed => 0, status => undef };
}

# True when the SSH client is gone: the session's stdout pipe (sshd's end) was closed.
sub client_gone () {
  my $poll = IO::Poll->new;
  $poll->mask(\*STDOUT => POLLOUT);
  $poll->poll(0);
  return ($poll->events(\*STDOUT) & (POLLERR | POLLHUP)) ? 1 : 0;
}

# Waits for every child; TERM to its process group at its deadline, KILL one second later. When the
# client goes away, KILL at once. A child that still cannot be reaped KILL_GIVEUP_S after its KILL
# (a process in D state on a wedged driver, a frozen cgroup) is left to init: it does not pin the session.
# $pipes: optional { fh => sub (bytes) } read while waiting (a batch's capped outputs).
sub wait_all ($pipes, @kids) {
  my $sel = IO::Select->new(map { $_->{fh} } values %{ $pipes // {} });
  my %by_fd = map { fileno($_->{fh}) => $_ } values %{ $pipes // {} };
  my $next_check = 0;
  for (;;) {
    my $left = 0;
    my $now = time;
    my $gone = 0;
    if ($now >= $next_check) { $gone = client_gone(); $next_check = $now + 0.2; }
    for my $k (@kids) {
      next if defined $k->{status};
      my $r = waitpid($k->{pid}, WNOHANG);
      if ($r == $k->{pid}) { $k->{status} = $?; kill('KILL', -$k->{pid}) if $k->{termed}; next; }
      if ($gone && !$k->{killed}) { kill('KILL', -$k->{pid}); $k->{killed} = $now; $k->{termed} ||= $now; $k->{gone} = 1; }
      if (!$k->{termed} && $now >= $k->{deadline}) { kill('TERM', -$k->{pid}); $k->{termed} = $now; }
      elsif ($k->{termed} && !$k->{killed} && $now >= $k->{termed} + KILL_AFTER_S) { kill('KILL', -$k->{pid}); $k->{killed} = $now; }
      elsif ($k->{killed} && $now >= $k->{killed} + KILL_GIVEUP_S) { $k->{status} = -1; $k->{unreaped} = 1; next; }
      $left++;
    }
    # The children's output, as it comes (a reader that stopped early would block them on a full pipe);
    # waiting on the pipes for up to 10 ms is this loop's pause.
    if ($sel->count) {
      for my $fh ($sel->can_read(0.01)) {
        my $p = $by_fd{ fileno $fh };
        my $n = sysread($fh, my $buf, 262144);
        if (!$n) { $sel->remove($fh); close $fh; next; }
        $p->{take}->($buf);
      }
      next if $left;
    }
    if (!$left) {
      # Every child ended (or was left to init): what is still in the pipes, then done. A pipe whose
      # writer was left to init never ends: it is read only while it has data.
      while ($sel->count) {
        my @ready = $sel->can_read(0.05);
        last unless @ready;
        for my $fh (@ready) {
          my $p = $by_fd{ fileno $fh };
          my $n = sysread($fh, my $buf, 65536);
          if (!$n) { $sel->remove($fh); close $fh; next; }
          $p->{take}->($buf);
        }
      }
      return;
    }
    sleep 0.01;
  }
}

# GNU timeout's statuses: 124 after TERM, 137 after KILL; else the program's exit code or 128+signal.
sub code_of ($k) {
  return 137 if $k->{killed};
  return 124 if $k->{termed};
  my $s = $k->{status};
  return ($s & 127) ? 128 + ($s & 127) : $s >> 8;
}

# Runs one program with its stdout and stderr relayed through this process (up to RELAY_CAP bytes
# each), never handed to sshd directly: a child that outlives this process (unreaped, left to init)
# then holds no end of the session, which ends when this process does.
sub run_relayed ($c) {
  pipe(my $or, my $ow) or refuse('cannot make a pipe');
  pipe(my $er, my $ew) or refuse('cannot make a pipe');
  my $k = spawn($c, $ow, $ew);
  close $ow; close $ew;
  binmode(STDOUT, ':raw'); binmode(STDERR, ':raw');
  my %sent = (out => 0, err => 0);
  my $relay = sub ($to, $which) {
    return sub ($b) {
      return if $sent{$which} >= RELAY_CAP;
      $b = substr($b, 0, RELAY_CAP - $sent{$which});
      $sent{$which} += length $b;
      syswrite($to, $b);
    };
  };
  wait_all({ out => { fh => $or, take => $relay->(\*STDOUT, 'out') }, err => { fh => $er, take => $relay->(\*STDERR, 'err') } }, $k);
  return $k;
}

sub run_one ($c) {
  my $k = run_relayed($c);
  exit code_of($k) if $k->{termed};
  my $s = $k->{status};
  if ($s & 127) {
    my $sig = $s & 127;
    $SIG{$_} = 'DEFAULT' for keys %SIG;
    kill($sig, $$);
    exit 128 + $sig;
  }
  exit($s >> 8);
}

# Each part's stdout and stderr through a pipe, read as they come: the first PART_CAP bytes are kept,
# the rest only counted. Nothing is written to the host's disk.
sub run_batch ($cmd) {
  my (@running, %pipes);
  my $i = 0;
  for my $p (@{ $cmd->{batch} }) {
    my $c = command_of($p, $cmd->{where}, $p->{ms}, 1);
    pipe(my $or, my $ow) or refuse('cannot make a pipe');
    pipe(my $er, my $ew) or refuse('cannot make a pipe');
    my $k = spawn($c, $ow, $ew);
    close $ow; close $ew;
    $k->{out} = ''; $k->{osz} = 0; $k->{err} = ''; $k->{esz} = 0;
    for my $x ([$or, 'out', 'osz'], [$er, 'err', 'esz']) {
      my ($fh, $buf, $size) = @$x;
      $pipes{"$i$buf"} = { fh => $fh, take => sub ($b) {
        $k->{$size} += length $b;
        $k->{$buf} .= substr($b, 0, PART_CAP - length $k->{$buf}) if length $k->{$buf} < PART_CAP;
      } };
    }
    push @running, $k;
    $i++;
  }
  wait_all(\%pipes, @running);
  binmode(STDOUT, ':raw');
  for my $n (0 .. $#running) {
    my $k = $running[$n];
    print "gpu-medic-part $n " . code_of($k) . " $k->{osz} $k->{esz} " . encode_base64($k->{out}, '') . ' ' . encode_base64($k->{err}, '') . "\n";
  }
  exit 0;
}

# ---------------------------------------------------------------- run slots

# At most max_runs agent runs at once on this host: each holds a lock on one slot file in run_dir
# (flock, released by the kernel when the run ends, however it ends). Slot 0 is kept for destructive
# verbs, so reads can never block a recovery; a read over the cap is told busy (its own exit status).
my $SLOT;
sub take_slot ($destructive) {
  # An agent that runs as its account (unprivileged=yes) can write neither /run nor its root-owned
  # home: its slots live in a 0700 dir of its own under /tmp (checked below: its owner, no other access).
  my $dir = $> == 0 ? $CFG->{run_dir} : "/tmp/gpu-medic-run-$>";
  File::Path::make_path($dir, { mode => 0700 }) unless -d $dir;
  my @st = lstat $dir;
  refuse("run_dir $dir is not a directory of this agent's user, writable by it alone")
    unless @st && -d _ && $st[4] == $> && !($st[2] & 022);
  my @order = $destructive ? (0 .. $CFG->{max_runs} - 1) : (1 .. $CFG->{max_runs} - 1);
  my $until = time + ($destructive ? DESTRUCTIVE_SLOT_WAIT_S : 0);
  for (;;) {
    for my $i (@order) {
      sysopen(my $fh, "$dir/slot.$i", O_RDWR | O_CREAT, 0600) or next;
      if (flock($fh, LOCK_EX | LOCK_NB)) { $SLOT = $fh; return 1; }
      close $fh;
    }
    last if time >= $until;
    sleep 0.1;
  }
  return 0;
}

sub busy_exit () {
  print STDERR "gpu-medic-agent: busy: $CFG->{max_runs} runs at once on this host already (max_runs=); try again\n";
  exit BUSY_STATUS;
}

# ---------------------------------------------------------------- envelopes (destructive verbs)

sub read_stdin () {
  my $buf = '';
  local $SIG{ALRM} = sub { die "stdin-timeout\n" };
  alarm STDIN_WAIT_S;
  my $ok = eval {
    while (length($buf) <= MAX_STDIN) {
      my $n = sysread(STDIN, $buf, 65536, length $buf);
      die "stdin-error\n" unless defined $n;
      last if $n == 0;
    }
    1;
  };
  alarm 0;
  refuse('the envelopes on stdin did not end (no EOF)') unless $ok;
  refuse('more than 256 KiB on stdin') if length($buf) > MAX_STDIN;
  return $buf;
}

sub envelopes () {
  my %env = (decision => []);
  for my $l (split /\n/, read_stdin()) {
    next if $l eq '';
    my ($kind, $body, $sig) = $l =~ m{\A(request|decision|plan) ([A-Za-z0-9+/=]+) ([A-Za-z0-9+/]{86}==)\z}
      or refuse('an unreadable line on stdin (want: request|decision|plan <base64 body> <base64 sig>)');
    my $e = { body => decode_base64($body), sig => decode_base64($sig) };
    if ($kind eq 'decision') {
      refuse('more than ' . MAX_DECISIONS . ' decisions on stdin') if @{ $env{decision} } >= MAX_DECISIONS;
      push @{ $env{decision} }, $e;
      next;
    }
    refuse("two ${kind}s on stdin") if $env{$kind};
    $env{$kind} = $e;
  }
  return \%env;
}

sub write_file ($path, $bytes) {
  open(my $h, '>:raw', $path) or refuse('cannot write a temporary file');
  print {$h} $bytes; close($h) or refuse('cannot write a temporary file');
}

# OpenSSL 3 verifies (never this program's own crypto); any one of the keys is enough.
sub verified ($env, $keys_cfg) {
  my $openssl = find_program('openssl');
  refuse('openssl is not on the configured path') unless defined $openssl;
  my $dir = tempdir('gpu-medic-agent.XXXXXX', TMPDIR => 1, CLEANUP => 1);
  write_file("$dir/body", $env->{body});
  write_file("$dir/sig", $env->{sig});
  for my $key (grep { $_ ne '' } split /\s*,\s*/, $keys_cfg) {
    next unless eval { root_owned_file($key, 'key') };
    my $pid = fork;
    refuse('cannot fork') unless defined $pid;
    if ($pid == 0) {
      open(STDIN, '<', '/dev/null'); open(STDOUT, '>', '/dev/null'); open(STDERR, '>', '/dev/null');
      %ENV = (PATH => $CFG->{path});
      exec { $openssl } 'openssl', 'pkeyutl', '-verify', '-pubin', '-inkey', $key, '-rawin', '-in', "$dir/body", '-sigfile', "$dir/sig";
      _exit(127);
    }
    waitpid($pid, 0);
    return 1 if $? == 0;
  }
  return 0;
}

# Protocol 2's envelopes (agent/PROTOCOL.md, "Envelopes"): the request names the host, the container
# and (for an alert's reset) the one GPU the bot resolved from its own inventory; both carry the
# signer's memberships (teams), empty when none are configured.
my %FIELDS = (
  request => [qw(incident target host vmid gpu requester groups channel signed_at expires_at nonce)],
  decision => [qw(approval incident plan decision decider groups channel signed_at expires_at nonce)],
);

sub fields_of ($kind, $body) {
  my $h = "gpu-medic $kind v2\n";
  if (substr($body, 0, length "gpu-medic $kind v1\n") eq "gpu-medic $kind v1\n") {
    refuse("the signed $kind is protocol 1 (it names no host): upgrade the bot and the worker (they must sign envelopes v2, plans v3)");
  }
  refuse("the signed text is not a $kind") unless substr($body, 0, length $h) eq $h && $body =~ /\n\z/;
  my @lines = split /\n/, substr($body, length $h), -1;
  pop @lines;
  my @names = @{ $FIELDS{$kind} };
  refuse("the signed $kind has unexpected fields") unless @lines == @names;
  my %f;
  for my $i (0 .. $#names) {
    my $n = $names[$i];
    refuse("the signed $kind has unexpected fields") unless substr($lines[$i], 0, length($n) + 1) eq "$n=";
    $f{$n} = substr($lines[$i], length($n) + 1);
  }
  return \%f;
}

sub as_int ($v) { return defined $v && !ref $v && "$v" =~ /\A(0|[1-9][0-9]{0,15})\z/ ? "$v" : undef }

# Times on the host's own clock: signed no more than MAX_FUTURE_MS ahead of it, living no longer than
# max_lifetime_s, and (unless $past_ok, a tier-2 step's request) not yet expired.
sub times_ok ($f, $kind, $past_ok = 0) {
  my ($at, $exp) = (as_int($f->{signed_at}), as_int($f->{expires_at}));
  refuse("the signed $kind has unreadable times") unless defined $at && defined $exp && $exp > $at;
  my $now = int(time * 1000);
  refuse("the signed $kind is signed in the future (more than 60 s ahead of this host's clock)") if $at > $now + MAX_FUTURE_MS;
  refuse("the signed $kind lives longer than this host allows (max_lifetime_s=$CFG->{max_lifetime_s})")
    if $exp - $at > $CFG->{max_lifetime_s} * 1000;
  refuse("the signed $kind has expired") unless $past_ok || $exp > $now;
  return $at + 0;
}

# Proxmox's cgroup rule (src/gpu/container-cgroup.ts, inContainerCgroup): some hierarchy names
# `lxc/<vmid>` as its outermost container, none names another; any line that is not a cgroup line: no.
sub in_container_cgroup ($text, $vmid) {
  my $named = 0;
  for my $l (split /\n/, $text) {
    next if $l eq '';
    my ($path) = $l =~ m{\A[0-9]+:[^:]*:(/.*)\z} or return 0;
    my @p = split m{/}, $path, -1;
    my $v;
    for my $i (0 .. $#p - 1) {
      if ($p[$i] eq 'lxc' && $p[$i + 1] =~ /\A[1-9][0-9]{0,9}\z/) { $v = $p[$i + 1]; last; }
    }
    next unless defined $v;
    return 0 unless $v eq $vmid;
    $named = 1;
  }
  return $named;
}

# `pct config` → host device minors passed to the container (src/agent-grammar/templates/unstick-commands.ts,
# parsePctConfigGpuMinors): `devN: [path=]/dev/nvidiaM[,...]` or `lxc.mount.entry: /dev/nvidiaM ...`,
# up to the first [snapshot] section. An allow line alone passes nothing.
sub pct_gpu_minors ($text) {
  my %seen;
  my @out;
  for my $raw (split /\n/, $text) {
    my $l = $raw =~ s/\A\s+|\s+\z//gr;
    last if $l =~ /\A\[/;
    my ($m) = $l =~ m{\Adev[0-9]+:\s*(?:path=)?/dev/nvidia([0-9]{1,4})(?:,|\z)};
    ($m) = $l =~ m{\Alxc\.mount\.entry:\s*/dev/nvidia([0-9]{1,4})\s} unless defined $m;
    push @out, $m + 0 if defined $m && !$seen{$m + 0}++;
  }
  return @out;
}

# `nvidia-smi -q -x` → { lc uuid => minor } (parseXmlGpuMinors).
sub xml_gpu_minors ($xml) {
  my %m;
  my @blocks = split /<gpu id="/, $xml;
  shift @blocks;
  for my $b (@blocks) {
    my ($uuid) = $b =~ m{<uuid>\s*(GPU-[0-9A-Fa-f-]{36})\s*</uuid>};
    my ($minor) = $b =~ m{<minor_number>\s*([0-9]{1,4})\s*</minor_number>};
    $m{lc $uuid} = $minor + 0 if defined $uuid && defined $minor;
  }
  return \%m;
}

# A program's whole stdout (capped), run through path= with no shell; undef when it fails.
sub read_program ($ms, @argv) {
  my $prog = find_program($argv[0]);
  return undef unless defined $prog;
  pipe(my $r, my $w) or refuse('cannot make a pipe');
  my $k = spawn({ prog => $prog, argv => \@argv, ms => $ms }, $w, undef);
  close $w;
  my $buf = '';
  while (length $buf < PART_CAP) { my $n = sysread($r, $buf, 65536, length $buf); last unless $n; }
  close $r;
  wait_all(undef, $k);
  return code_of($k) == 0 ? $buf : undef;
}

# The host's own reading of which GPUs the container is given: `pct config <vmid>` and `nvidia-smi -q -x`.
sub gpu_passed_to ($uuid, $vmid) {
  my $cfg = read_program(10000, 'pct', 'config', $vmid);
  refuse("cannot read pct config $vmid on this host") unless defined $cfg;
  my $xml = read_program(20000, 'nvidia-smi', '-q', '-x');
  refuse('cannot read nvidia-smi -q -x on this host') unless defined $xml;
  my $minor = xml_gpu_minors($xml)->{lc $uuid};
  return defined $minor && grep { $_ == $minor } pct_gpu_minors($cfg);
}

sub verified_fields ($kind, $env) {
  refuse("the $kind does not carry a valid signature of the bot") unless verified($env, $CFG->{bot_keys});
  return fields_of($kind, $env->{body});
}

# The protocol's checks, in order (agent/PROTOCOL.md, "Checks"); the first failure refuses.
# Everything acted on comes from the signed plan and the bot's signed request and decisions,
# checked against this host's own identity (machine=, vmid=) and its own readings.
sub check_destructive ($p, $where) {
  my $verb = $p->{verb};
  my @a = @{ $p->{args} };
  my @types = @{ $p->{def}{args} };
  # Arguments are found by type, so the grammar's order is the grammar's business.
  my $at = sub ($t) { my ($i) = grep { $types[$_] eq $t } 0 .. $#types; return defined $i ? $a[$i] : undef };
  my @rest = @a[@types .. $#a];
  my ($incident, $approval) = ($at->('incident'), $at->('approval'));
  refuse("destructive verb $verb carries no incident and approval") unless defined $incident && defined $approval;
  refuse("destructive verb $verb has no checks in this agent") unless $verb =~ /\A(signal|reset|persistence)\z/;
  $audit_ctx{incident} = $incident;
  $audit_ctx{approval} = $approval;
  my $side = $verb eq 'signal' ? ($at->('side') // '') : 'host';
  if ($verb eq 'signal') {
    refuse('signal targets must come in threes (pid start ctpid)') if @rest % 3 || !@rest;
    $audit_ctx{targets} = join(',', map { "$rest[3 * $_]:$rest[3 * $_ + 1]" } 0 .. @rest / 3 - 1);
  } else {
    refuse("$verb names no GPU") unless defined $at->('uuid');
    $audit_ctx{targets} = $at->('uuid');
  }
  # 0. this host knows who it is
  my $self = $CFG->{role} eq 'self';
  refuse('this agent has no machine= in its config (install.sh --machine ID): destructive verbs are refused until it does')
    if $CFG->{machine} eq '';
  refuse('this agent (role=self) has no vmid= in its config (install.sh --vmid N)') if $self && $CFG->{vmid} eq '';

  my $env = envelopes();
  refuse('no signed plan on stdin') unless $env->{plan};
  refuse('the plan does not carry a valid worker signature') unless verified($env->{plan}, $CFG->{worker_keys});
  refuse('no signed request on stdin') unless $env->{request};

  # 1. the plan: its step's tier and kind decide what may run, never the caller's approval word
  my $pb = $env->{plan}{body};
  my $ph = "gpu-medic plan v1\n";
  refuse('the signed plan is not a plan') unless substr($pb, 0, length $ph) eq $ph;
  my $plan = eval { JSON::PP->new->utf8->decode(substr($pb, length $ph)) };
  refuse('the signed plan is not readable') unless ref $plan eq 'HASH' && ref $plan->{step} eq 'HASH';
  refuse('the signed plan is protocol 1 (it names no host): upgrade the worker') unless ($plan->{v} // 0) eq '3';
  my $step = $plan->{step};
  my ($tier, $kind) = (as_int($step->{tier}) // '', $step->{kind} // '');
  my ($pvmid, $pexp, $pcreated) = map { as_int($plan->{$_}) // '' } qw(vmid expiresAt createdAt);
  my $papproval = $plan->{approvalId} // '';
  refuse('the plan is for another incident') unless ($plan->{incidentId} // '') eq $incident;
  if ($approval eq 'none') {
    refuse('approval none is only for a container-side signal') unless $verb eq 'signal' && $side eq 'container';
    refuse('approval none is only for a tier-1 container step with no approval')
      unless $tier eq '1' && $kind eq 'container_signal' && $papproval eq '';
  } else {
    refuse('the plan is for another approval') unless $papproval eq $approval;
    if ($verb eq 'signal' && $side eq 'container') {
      refuse('the plan\'s step is not a container signal') unless $kind eq 'container_signal';
    } elsif ($verb eq 'signal') {
      refuse('a host kill needs a tier-2 host_kill step in the plan') unless $tier eq '2' && $kind eq 'host_kill';
    } else {
      refuse("$verb needs a tier-2 host_reset step in the plan") unless $tier eq '2' && $kind eq 'host_reset';
    }
  }

  # 2. this host and container: the plan's, the bot's request's, and this agent's own
  my $req = verified_fields('request', $env->{request});
  refuse('the request is for another incident') unless $req->{incident} eq $incident;
  refuse('the request is for another container than the plan')
    unless $req->{target} eq ($plan->{container} // '') && $req->{vmid} eq $pvmid;
  refuse('the request is for another host than the plan') unless $req->{host} eq ($plan->{host} // '');
  if ($self) {
    refuse("the plan is for another machine than this one ($CFG->{machine})") unless ($plan->{container} // '') eq $CFG->{machine};
    refuse("the plan is for another container than this one (vmid $CFG->{vmid})") unless $pvmid eq $CFG->{vmid};
  } else {
    refuse("the plan is for another host than this one ($CFG->{machine})") unless ($plan->{host} // '') eq $CFG->{machine};
  }
  refuse('the container is not the plan\'s') if $where->{kind} eq 'ct' && $where->{vmid} ne $pvmid;
  my $rgpu = $req->{gpu};
  refuse('the request names one GPU to reset: no process may be signalled') if $rgpu ne '' && $verb eq 'signal';

  # 3. time, on this host's clock
  refuse('the plan has unreadable times') unless $pexp ne '' && $pcreated ne '' && $pexp > $pcreated;
  if ($approval eq 'none') {
    times_ok($req, 'request');
  } else {
    times_ok($req, 'request', 1);
    refuse('the plan\'s card has expired') if $pexp <= int(time * 1000);
  }

  # 4. the decisions: each by a decider the signed plan names, before the card's expiry; one per person
  if ($approval ne 'none') {
    my @decs = @{ $env->{decision} };
    refuse('no signed decision on stdin') unless @decs;
    my $requester = $plan->{requester} // '';
    my @approvers = grep { !ref $_ } @{ ref $plan->{approvers} eq 'ARRAY' ? $plan->{approvers} : [] };
    my $esc = ref $plan->{escalation} eq 'HASH' ? $plan->{escalation} : undef;
    my @esc_approvers = $esc ? grep { !ref $_ } @{ ref $esc->{approvers} eq 'ARRAY' ? $esc->{approvers} : [] } : ();
    my $esc_at = $esc ? as_int($esc->{at}) : undef;
    my $quorum = as_int($plan->{quorum} // 1) // 1;
    refuse('the plan asks for an unreadable quorum') unless $quorum >= 1 && $quorum <= MAX_DECISIONS;
    my %by;
    for my $d (@decs) {
      my $f = verified_fields('decision', $d);
      refuse('the decision is for another approval') unless $f->{approval} eq $approval;
      refuse('the decision is for another incident') unless $f->{incident} eq $incident;
      refuse('the decision is not an approval') unless $f->{decision} eq 'approved';
      refuse('the decision is for another plan') unless $f->{plan} eq sha256_hex($pb);
      my $signed = times_ok($f, 'decision');
      my $who = $f->{decider};
      refuse('the requester cannot approve their own request') if $who eq $requester || $who eq $req->{requester};
      refuse('the decision was signed after the card expired') if $signed >= $pexp;
      refuse('the decision was signed before the card was made') if $signed < $pcreated;
      if (!grep { $_ eq $who } @approvers) {
        refuse('the decider is not one of the plan\'s approvers') unless grep { $_ eq $who } @esc_approvers;
        refuse('an escalation approver decided before the card escalated') unless defined $esc_at && $signed >= $esc_at;
      }
      refuse('two decisions by one decider') if $by{$who}++;
    }
    refuse("the plan needs $quorum distinct approvers, got " . scalar(keys %by)) if keys(%by) < $quorum;
  }

  # 5. the targets: in the plan, and in the request's container by this host's own reading
  if ($verb eq 'signal') {
    my $inode = $at->('int') // '';
    refuse("signal $side is not allowed on $where->{kind}")
      if ($side eq 'host') != ($where->{kind} eq 'host' && $CFG->{role} eq 'host');
    my @targets = grep { ref $_ eq 'HASH' } @{ ref $step->{targets} eq 'ARRAY' ? $step->{targets} : [] };
    for (my $i = 0; $i < @rest; $i += 3) {
      my ($pid, $start, $ct) = @rest[$i .. $i + 2];
      my $hit;
      for my $t (@targets) {
        my ($hp, $cp, $st) = map { as_int($t->{$_}) // '' } qw(hostPid containerPid startTimeTicks);
        if ($side eq 'host') { $hit = $t if $hp eq $pid && $st eq $start && $cp eq $ct; }
        else { $hit = $t if $cp eq $pid && $st eq $start && $ct eq '0'; }
        last if $hit;
      }
      refuse("target $pid:$start is not in the signed plan") unless $hit;
      if ($side eq 'host') {
        refuse("target $pid:$start is in another PID namespace than the plan says")
          unless ($hit->{pidNs} // '') eq "pid:[$inode]";
        my $cg = -r "/proc/$pid/cgroup" ? eval { slurp("/proc/$pid/cgroup") } : undef;
        refuse("target $pid:$start is not in container $req->{vmid}'s cgroup on this host")
          unless defined $cg && $req->{vmid} ne '' && in_container_cgroup($cg, $req->{vmid});
      }
    }
  } else {
    my $uuid = $at->('uuid');
    my @gpus = grep { ref $_ eq 'HASH' } @{ ref $step->{gpus} eq 'ARRAY' ? $step->{gpus} : [] };
    refuse("GPU $uuid is not in the signed plan") unless grep { lc($_->{uuid} // '') eq lc $uuid } @gpus;
    if ($rgpu ne '') {
      refuse("GPU $uuid is not the one the request names") unless lc $rgpu eq lc $uuid;
    } else {
      refuse("GPU $uuid is not passed to container $req->{vmid} by its pct config on this host")
        unless $req->{vmid} ne '' && gpu_passed_to($uuid, $req->{vmid});
    }
  }
}

# ---------------------------------------------------------------- main

sub main (@argv) {
  my ($config, $front) = (DEFAULT_CONFIG, undef);
  my $via_sudo = exists $ENV{SUDO_USER} || exists $ENV{SUDO_UID};
  while (@argv) {
    my $o = shift @argv;
    last if $o eq '--';
    if ($o eq '--config' && @argv) { $config = shift @argv; }
    elsif ($o eq '--refuse' && @argv) { $front = shift @argv; }
    else { refuse('options are the front\'s own'); }
  }
  refuse("config $config: not an absolute path") unless $config =~ m{\A/};
  # Through sudo only the installed config (install.sh writes its path into this copy): another
  # root-owned file could name other keys or a wider path=.
  refuse('through sudo the config is the installed one only') if $via_sudo && $config ne DEFAULT_CONFIG;
  $CFG = load_config($config);
  # install.sh --no-sudo (a container whose owner gives the worker no root): the account runs it itself.
  refuse('the agent must run as root') unless $> == 0 || $CFG->{unprivileged} eq 'yes';
  if (defined $front) { refuse('the front refused the line: ' . ($FRONT_REASONS{$front} // 'unknown reason')); }
  my $g = load_grammar($CFG->{grammar});
  my $cmd = parse_command($g, @argv);
  if ($cmd->{version}) {
    print "gpu-medic-agent $g->{agentVersion} protocol 1\n";
    exit 0;
  }
  my $destructive = !$cmd->{batch} && $cmd->{def}{destructive};
  take_slot($destructive) or busy_exit();
  # Through sudo, sudo's own log line names every read; without it (root's forced key, an account
  # running the agent itself) the agent writes one, so every read leaves a trace on the host.
  audit('read') if !$destructive && !$via_sudo;
  run_batch($cmd) if $cmd->{batch};
  my $c = command_of($cmd, $cmd->{where}, $cmd->{ms}, 1);
  if ($destructive) {
    check_destructive($cmd, $cmd->{where});
    refuse('no audit line can be written (no syslog socket, audit file not writable)') unless audit('accepted');
    my $k = run_relayed($c);
    audit('done', status => code_of($k));
    exit code_of($k);
  }
  run_one($c);
}

# Run as a program; loaded with `require` (agent/test/explain.pl) it only defines its subs.
unless (caller) {
  $SIG{PIPE} = 'IGNORE';
  eval { main(@ARGV); 1 } or do {
    my $e = $@;
    refused_exit(ref $e eq 'Refusal' ? $e->{why} : 'internal error: ' . clean($e));
  };
}
1;
