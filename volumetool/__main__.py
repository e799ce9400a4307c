from volumetool.cli import main

main()
