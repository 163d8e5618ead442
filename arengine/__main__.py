from arengine.cli import main

main()
