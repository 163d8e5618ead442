"""What a result is written as: the output-format table (`formats`), MIDI (`midi`) and the
annotation tools' formats (`annotations`).

May import: kinds (a note's name), types.
"""
