#!/usr/bin/perl
# A corpus writer (tests/support/writers/cases.py, cases perl-*): one MMV file written by Perl's
# PCP::MMV (libpcp-mmv-perl), through its legacy mmv_stats_init, so always version 1.
#
#     perl tests/support/writers/pcp_mmv.pl PATH FLAGS
#
# PATH is absolute (a bare name goes under $PCP_TMP_DIR/mmv).  PCP::MMV's MMV_TYPE_ELAPSED
# is 10, not libpcp_mmv's 9, so no ELAPSED metric is written.
use strict;
use warnings;
use PCP::MMV;

my ($path, $flags) = @ARGV;
die "usage: $0 PATH FLAGS\n" unless defined $flags;

my @databases = (0 => 'tempdb', 1 => 'datadb', 2 => 'café');
my @indoms = ([1, \@databases, 'Databases', 'One instance per database.']);
my @metrics = (
    ['perl.requests', 1, MMV_TYPE_U64, MMV_INDOM_NULL,
     mmv_units(0, 0, 1, 0, 0, MMV_COUNT_ONE), MMV_SEM_COUNTER, 'requests served', ''],
    ['perl.maxtime', 2, MMV_TYPE_DOUBLE, MMV_INDOM_NULL,
     mmv_units(0, 1, 0, 0, MMV_TIME_MSEC, 0), MMV_SEM_INSTANT, 'longest request'],
    ['perl.version', 3, MMV_TYPE_STRING, MMV_INDOM_NULL,
     mmv_units(0, 0, 0, 0, 0, 0), MMV_SEM_DISCRETE],
    ['perl.db.count', 4, MMV_TYPE_U32, 1,
     mmv_units(0, 0, 1, 0, 0, MMV_COUNT_ONE), MMV_SEM_COUNTER, 'per database', 'queries per database'],
    ['perl.db.bytes', 5, MMV_TYPE_I64, 1,
     mmv_units(1, 0, 0, MMV_SPACE_KBYTE, 0, 0), MMV_SEM_INSTANT],
    ['perl.ratio', 6, MMV_TYPE_FLOAT, MMV_INDOM_NULL,
     mmv_units(0, 0, 0, 0, 0, 0), MMV_SEM_INSTANT],
    ['perl.db.signed', 7, MMV_TYPE_I32, 1,
     mmv_units(0, 0, 0, 0, 0, 0), MMV_SEM_INSTANT, 'a signed gauge'],
);

my $handle = mmv_stats_init($path, 3, $flags, \@metrics, \@indoms);
die "mmv_stats_init $path failed\n" unless defined $handle;

mmv_stats_inc($handle, 'perl.requests', '');
mmv_stats_add($handle, 'perl.requests', '', 41);
mmv_stats_set($handle, 'perl.maxtime', '', 12.5);
mmv_stats_set_string($handle, 'perl.version', '', '1.2.3-perl');
mmv_stats_add($handle, 'perl.db.count', 'tempdb', 3);
mmv_stats_add($handle, 'perl.db.count', 'datadb', 4);
mmv_stats_set($handle, 'perl.db.bytes', 'datadb', -1024);
mmv_stats_set($handle, 'perl.ratio', '', 0.125);
my $signed = mmv_lookup_value_desc($handle, 'perl.db.signed', 'tempdb');
mmv_set_value($handle, $signed, -7);
mmv_inc_value($handle, $signed, 2);
exit 0;
